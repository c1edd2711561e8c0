"""What a case returns: timings, ratios and goals (`baseline seconds / icetail seconds`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    seconds: float
    rows_in: int = 0  # data-file rows the reader had to consider
    rows_out: int = 0  # rows it returned
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Goal:
    name: str
    target: str
    value: float | None
    met: bool | None  # None: not measured
    note: str = ""


@dataclass
class CaseResult:
    case: str
    timings: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end of the case


def ratio(baseline: Timing | float, icetail: Timing | float) -> float:
    b = baseline.seconds if isinstance(baseline, Timing) else baseline
    i = icetail.seconds if isinstance(icetail, Timing) else icetail
    return round(b / i, 3) if i > 0 else float("inf")
