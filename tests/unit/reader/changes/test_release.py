"""The hold-and-release order shared by the Python API, the pipeline and the data source tasks
(reader/changes/release.py), on hand-made chunks: no JVM, no table."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from icetail.kernel.model import ChangeSplit, ChangeTask, ChangeType, CommitInfo, DataFileRef, FileChangeKind
from icetail.monitor.planning.summary_rules import Expectation
from icetail.reader.changes.checks import SnapshotCheck, SnapshotRules, SnapshotVerifier
from icetail.reader.changes.release import Release, releases, snapshot_batches
from icetail.reader.split.read import Chunk

# split id -> snapshot: A (1) has two splits, B (2) one, C (3) two
SNAPSHOT_OF = {"a1": 1, "a2": 1, "b1": 2, "c1": 3, "c2": 3}


def split_of(split_id: str, snapshot_id: int) -> ChangeSplit:
    data_file = DataFileRef(f"{split_id}.parquet", "PARQUET", 10, 100, 0, "()", snapshot_id)
    commit = CommitInfo(snapshot_id, None, "append", 0, snapshot_id, snapshot_id - 1)
    return ChangeSplit(ChangeTask(data_file, FileChangeKind.ADDED, commit), split_id=split_id)


def _chunk(split_id: str, start: int, rows: int, *, done: bool, inserts: int | None = None) -> Chunk:
    batch = pa.record_batch({"id": list(range(start, start + rows))})
    counts = ((ChangeType.INSERT.value, rows if inserts is None else inserts),)
    return Chunk(split_id, start, start + rows, batch, rows, 1, 0, done, change_counts=counts)


def _read() -> list[Chunk]:
    return [
        _chunk("a1", 0, 2, done=False),
        _chunk("a1", 2, 1, done=True),
        _chunk("a2", 0, 2, done=True),
        _chunk("b1", 0, 3, done=True),
        _chunk("c1", 0, 1, done=True),
        _chunk("c2", 0, 2, done=True),
    ]


def _shape(units: list[Release]) -> list[tuple[int, list[str], bool]]:
    return [(r.snapshot_id, [c.split_id for c in r.chunks], r.reconcile) for r in units]


def _verifier(*inserts_by_snapshot: tuple[int, int]) -> SnapshotVerifier:
    rules = [SnapshotRules(s, (Expectation("added-records", n, inserts_weight=1),)) for s, n in inserts_by_snapshot]
    return SnapshotVerifier(rules, [split_of(split_id, snapshot) for split_id, snapshot in SNAPSHOT_OF.items()])


def test_a_gathered_snapshot_leaves_whole_and_every_other_chunk_at_once() -> None:
    units = list(releases(_read(), SNAPSHOT_OF, {1}))
    assert _shape(units) == [
        (1, ["a1", "a1", "a2"], True),
        (2, ["b1"], False),
        (3, ["c1"], False),
        (3, ["c2"], False),
    ]
    assert [b.num_rows for b in units[0].batches] == [2, 1, 2]
    assert [(s, b.num_rows) for s, b in snapshot_batches(units)] == [(1, 2), (1, 1), (1, 2), (2, 3), (3, 1), (3, 2)]


def test_a_gathered_snapshot_at_the_end_of_the_read_leaves_too() -> None:
    assert _shape(list(releases(_read(), SNAPSHOT_OF, {3}))) == [
        (1, ["a1"], False),
        (1, ["a1"], False),
        (1, ["a2"], False),
        (2, ["b1"], False),
        (3, ["c1", "c2"], True),
    ]


def test_strict_holds_a_checked_snapshot_until_its_last_chunk_passes() -> None:
    checks: list[SnapshotCheck] = []
    units = list(releases(_read(), SNAPSHOT_OF, set(), _verifier((1, 5), (3, 3)), strict=True, on_check=checks.append))
    assert _shape(units) == [
        (1, ["a1", "a1", "a2"], False),
        (2, ["b1"], False),  # no rule proves B: it is not held
        (3, ["c1", "c2"], False),
    ]
    assert [(c.snapshot_id, c.inserts, c.mismatches) for c in checks] == [(1, 5, ()), (3, 3, ())]


def test_warn_checks_without_holding() -> None:
    checks: list[SnapshotCheck] = []
    units = list(releases(_read(), SNAPSHOT_OF, set(), _verifier((1, 6)), on_check=checks.append))
    assert len(units) == 6
    (check,) = checks
    assert [(m.rule, m.expected, m.found) for m in check.mismatches] == [("added-records", 6, 5)]


def test_a_refused_check_raises_before_any_chunk_of_its_snapshot_leaves() -> None:
    left: list[Release] = []

    def refuse(check: SnapshotCheck) -> None:
        if check.mismatches:
            raise RuntimeError(f"refused {check.snapshot_id}")

    with pytest.raises(RuntimeError, match="refused 3"):
        for unit in releases(_read(), SNAPSHOT_OF, {1}, _verifier((1, 5), (3, 4)), strict=True, on_check=refuse):
            left.append(unit)
    assert _shape(left) == [(1, ["a1", "a1", "a2"], True), (2, ["b1"], False)]


def test_a_gathered_snapshot_is_checked_before_it_leaves() -> None:
    def refuse(check: SnapshotCheck) -> None:
        if check.mismatches:
            raise RuntimeError("refused")

    units = releases(_read(), SNAPSHOT_OF, {1}, _verifier((1, 4)), strict=True, on_check=refuse)
    with pytest.raises(RuntimeError):
        next(units)


def test_a_split_read_in_part_is_never_checked() -> None:
    """A resumed batch's verifier has no rules for a snapshot it did not read whole: nothing is checked."""
    checks: list[SnapshotCheck] = []
    verifier = SnapshotVerifier([], [split_of(s, n) for s, n in SNAPSHOT_OF.items()])
    units = list(releases(_read(), SNAPSHOT_OF, set(), verifier, strict=True, on_check=checks.append))
    assert len(units) == 6 and checks == []


def test_the_read_is_closed_when_a_check_refuses_or_the_caller_stops() -> None:
    """The read (run_splits, which cancels its Spark jobs when closed) stops at once, not at garbage collection."""
    closed: list[str] = []

    def read(name: str) -> Iterator[Chunk]:
        try:
            yield from _read()
        finally:
            closed.append(name)

    def refuse(check: SnapshotCheck) -> None:
        if check.mismatches:
            raise RuntimeError("refused")

    refused = read("refused")
    with pytest.raises(RuntimeError):
        list(releases(refused, SNAPSHOT_OF, set(), _verifier((1, 4)), strict=True, on_check=refuse))
    assert closed == ["refused"]

    units = releases(read("stopped"), SNAPSHOT_OF, set())
    next(units)
    units.close()  # what a stop request or a caller leaving its loop does
    assert closed == ["refused", "stopped"]
