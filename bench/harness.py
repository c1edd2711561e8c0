"""The timing harness: timed runs, best of interleaved rounds, and the context every case gets."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `tests.support` is not an installed package
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402
from bench.procs import tree_cpu_seconds  # noqa: E402
from bench.results import Timing  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def timed(fn: Callable[[], Timing]) -> Timing:
    cpu = tree_cpu_seconds()
    timing = fn()
    timing.extra["cpu_s"] = round(tree_cpu_seconds() - cpu, 3)
    return timing


def _pick(runs: list[Timing]) -> Timing:
    chosen = min(runs, key=lambda t: t.seconds)
    chosen.extra["runs_s"] = [round(t.seconds, 4) for t in runs]
    chosen.extra["runs_cpu_s"] = [t.extra.get("cpu_s") for t in runs]
    return chosen


def best(fn: Callable[[], Timing], repeat: int) -> Timing:
    return _pick([timed(fn) for _ in range(max(repeat, 1))])


def interleaved(readers: dict[str, Callable[[], Timing] | None], repeat: int) -> dict[str, Timing]:
    """Run every reader once per round, `repeat` rounds, and keep each one's best run.

    Interleaving spreads the load of other processes on a shared machine over all readers alike.
    A reader given as None is skipped (`--skip-java`).
    """
    runs: dict[str, list[Timing]] = {name: [] for name, fn in readers.items() if fn is not None}
    for _ in range(max(repeat, 1)):
        for name, fn in readers.items():
            if fn is not None:
                runs[name].append(timed(fn))
    out = {name: _pick(r) for name, r in runs.items()}
    for name, fn in readers.items():
        if fn is None:
            out[name] = Timing(float("nan"), 0, 0, {"skipped": "--skip-java"})
    return out


@dataclass
class Context:
    args: argparse.Namespace
    scale: gen.Scale
    workdir: Path
    data: gen.DataSet
    catalog: Any
    spark: Any
    startup: dict[str, float]


def java(ctx: Context, fn: Callable[[], Timing]) -> Callable[[], Timing] | None:
    """A Java baseline, unless --skip-java (the smoke test) asked to leave them out."""
    return None if ctx.args.skip_java else fn
