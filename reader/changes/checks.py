"""A snapshot's changes counted against what its summary proves: the check itself, wherever it runs.

The rules come from the planner (monitor/planning/summary_rules.py reads them off the summary);
here they are only equations on a snapshot's raw DELETE and INSERT counts. `SnapshotVerifier`
adds the counts up as a snapshot's chunks are read (before carry-over removal, as the summary
counts them) and checks the snapshot once every split of it was read in full, in the driver (the
pipeline, the Python API) or in a Spark task (the data source). What a mismatch then does
(`--verify`) is the caller's: monitor/engine/verify.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from icetail.kernel.model import ChangeSplit, ChangeType
from icetail.reader.split.read import Chunk


class CountRule(Protocol):
    """`found(deletes, inserts)` must equal `expected` (the planner's `Expectation`)."""

    @property
    def rule(self) -> str: ...

    @property
    def expected(self) -> int: ...

    def found(self, deletes: int, inserts: int) -> int: ...


@dataclass(frozen=True)
class Mismatch:
    snapshot_id: int
    rule: str
    expected: int
    found: int

    def describe(self) -> str:
        return (
            f"snapshot {self.snapshot_id} fails summary rule {self.rule}: "
            f"its summary says {self.expected}, icetail's changes give {self.found}"
        )


@dataclass(frozen=True)
class SnapshotCheck:
    """The rules evaluated for one snapshot and those that failed (both empty: nothing provable)."""

    snapshot_id: int
    deletes: int
    inserts: int
    rules: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]


@dataclass(frozen=True)
class SnapshotRules:
    """The rules of one snapshot, found on the driver and evaluated where its rows are read (a Spark task)."""

    snapshot_id: int
    rules: tuple[CountRule, ...]

    def check(self, deletes: int, inserts: int) -> SnapshotCheck:
        mismatches = tuple(
            Mismatch(self.snapshot_id, rule.rule, rule.expected, rule.found(deletes, inserts))
            for rule in self.rules
            if rule.found(deletes, inserts) != rule.expected
        )
        return SnapshotCheck(self.snapshot_id, deletes, inserts, tuple(r.rule for r in self.rules), mismatches)


class SnapshotVerifier:
    """Counts each checked snapshot's raw changes from its chunks; checks it when its last split is read.

    The same counting runs in the driver (the pipeline, the Python API) and in a Spark task (the
    data source), which is why it takes rules found beforehand rather than the table's metadata.
    """

    def __init__(self, rules: Iterable[SnapshotRules], splits: Iterable[ChangeSplit]) -> None:
        self._rules = {r.snapshot_id: r for r in rules}
        self._snapshot_of: dict[str, int] = {}
        self._pending: dict[int, set[str]] = defaultdict(set)
        for split in splits:
            snapshot_id = split.task.commit.snapshot_id
            if snapshot_id in self._rules:
                self._snapshot_of[split.split_id] = snapshot_id
                self._pending[snapshot_id].add(split.split_id)
        self._counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])

    def proves(self, snapshot_id: int) -> bool:
        """Whether some rule will check the snapshot (under strict its rows are worth holding until then)."""
        rules = self._rules.get(snapshot_id)
        return rules is not None and bool(rules.rules)

    def add(self, chunk: Chunk) -> SnapshotCheck | None:
        """Count the chunk; the snapshot's check once its last split is done (None before, or if unchecked)."""
        snapshot_id = self._snapshot_of.get(chunk.split_id)
        if snapshot_id is None or not self._pending[snapshot_id]:
            return None
        counts = self._counts[snapshot_id]
        for change_type, count in chunk.change_counts:
            if change_type == ChangeType.DELETE.value:
                counts[0] += count
            elif change_type == ChangeType.INSERT.value:
                counts[1] += count
        if chunk.done:
            self._pending[snapshot_id].discard(chunk.split_id)
        if self._pending[snapshot_id]:
            return None
        return self._rules[snapshot_id].check(counts[0], counts[1])
