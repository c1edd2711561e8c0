"""Rate limits of the `icetail` stream (maxRowsPerTrigger, maxFilesPerTrigger, maxBytesPerTrigger).

`limited_end` chooses where a micro-batch ends from table metadata alone (manifests: record counts,
file sizes, row-group offsets), before anything is read: Spark logs that end offset, and a restart
re-plans the same (start, end] from it, so the cut must be a pure function of the offsets and the
table. A batch admits whole units in plan order while they fit, and always at least one:

- a split of a snapshot's added or removed data file, which the row limit may cut at a file row
  (an estimate from the split's share of the file's row groups; the rows on each side of the cut are read
  by position, so a wrong estimate changes the batch sizes, never which rows are delivered);
- any other split (a file that gained or lost deletes), whole;
- a snapshot reconciled whole (update pairing, carry-over removal: `gathered_snapshots`), or under
  `verify` strict one a summary rule checks, whole: a limit never cuts it, so pairs stay exact.

`cut_plan` is the other side: the plan of (start, end] with the splits outside the offsets' positions
left out and the split at each position read from or up to its row (`windows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeSplit, FileChangeKind
from icetail.monitor.engine.spark_source.offsets import SnapshotPosition, StreamOffset
from icetail.monitor.engine.spark_source.options import TableOptions, TriggerLimits
from icetail.monitor.engine.verify import VerifyMode, rules_of_plan
from icetail.monitor.planning.diff import REPLACE, operation_of
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import ChangePlan, Planner
from icetail.reader.changes.read_setup import has_row_lineage, identifier_names
from icetail.reader.changes.release import gathered_snapshots

Window = tuple[int, int | None]  # file rows [start, end) of a split a batch reads (end None: to its end)


@dataclass(frozen=True)
class _Unit:
    """What a batch admits or leaves whole: splits [first, first + len(splits)) of one snapshot."""

    first: int
    splits: tuple[ChangeSplit, ...]
    rows: int  # estimated change rows
    files: frozenset[str]
    bytes: int
    rows_from: int = 0  # a cuttable split: its estimated file rows [rows_from, rows_from + rows)
    cuttable: bool = False


def limited_end(
    planner: Planner,
    table: Table,
    start: StreamOffset,
    end: StreamOffset,
    limits: TriggerLimits,
    source: TableOptions,
    schema_id: int | None,
) -> StreamOffset:
    """Where the batch from `start` ends under `limits`: `end` (a snapshot boundary) or before it.

    Plans snapshot by snapshot and stops at the first cut, so a long backlog is not planned whole.
    """
    if end.snapshot_id is None:
        return end
    metadata = table.metadata
    identifiers = identifier_names(table, schema_id, source.identifier_columns)
    lineage_pairing = has_row_lineage(table)
    previous = start.snapshot_id
    previous_ms = start.timestamp_ms
    ordinal = start.next_ordinal
    rows = size = 0
    files: set[str] = set()
    admitted = False
    for snapshot in snapshots_between(metadata, start.snapshot_id, end.snapshot_id):
        snapshot_id = snapshot.snapshot_id
        if operation_of(snapshot) != REPLACE:
            plan = planner.plan(previous, snapshot_id, ordinal_base=ordinal)
            resumed = start.position if start.plan_end == snapshot_id else None
            whole = snapshot_id in gathered_snapshots(
                plan.tasks, carry_over_removal=True, identifiers=identifiers, lineage_pairing=lineage_pairing
            )
            if source.verify == VerifyMode.STRICT:
                rules = rules_of_plan(metadata, plan.splits, from_snapshot_exclusive=previous, collapsed=False)
                whole = whole or bool(rules.get(snapshot_id) and rules[snapshot_id].rules)
            for unit in _units(plan.splits, resumed, whole=whole and resumed is None):
                cut: int | None = None  # the batch ends before split `cut` of this snapshot
                row = 0
                over_files = limits.max_files is not None and len(files | unit.files) > limits.max_files
                over_bytes = limits.max_bytes is not None and size + unit.bytes > limits.max_bytes
                room = limits.max_rows - rows if limits.max_rows is not None else None
                if admitted and (over_files or over_bytes):
                    cut = unit.first
                elif room is not None and unit.rows > room:
                    if unit.cuttable and room > 0:
                        cut, row = unit.first, unit.rows_from + room
                    elif admitted:
                        cut = unit.first
                if cut is not None:
                    return _inside(plan.splits, snapshot_id, cut, row, previous, previous_ms, ordinal)
                admitted = True
                rows, size = rows + unit.rows, size + unit.bytes
                files |= unit.files
            ordinal += 1
        previous, previous_ms = snapshot_id, snapshot.timestamp_ms
        if _full(limits, rows, len(files), size):
            break
    return StreamOffset(previous, previous_ms, ordinal)


def _full(limits: TriggerLimits, rows: int, files: int, size: int) -> bool:
    """Whether nothing more fits (the next snapshot need not be planned to know it)."""
    return (
        (limits.max_rows is not None and rows >= limits.max_rows)
        or (limits.max_files is not None and files >= limits.max_files)
        or (limits.max_bytes is not None and size >= limits.max_bytes)
    )


def _inside(
    splits: tuple[ChangeSplit, ...],
    snapshot_id: int,
    split: int,
    row: int,
    previous: int | None,
    previous_ms: int | None,
    ordinal: int,
) -> StreamOffset:
    """The offset before file row `row` of split `split` of the snapshot (row 0: before that split)."""
    at = SnapshotPosition(snapshot_id, split, row, splits[split].split_id)
    if split == 0 and row == 0:  # before the snapshot: its parent's boundary
        return StreamOffset(previous, previous_ms, ordinal)
    return StreamOffset(previous, previous_ms, ordinal, at)


def _units(splits: tuple[ChangeSplit, ...], resumed: SnapshotPosition | None, *, whole: bool) -> Iterator[_Unit]:
    """The units of one snapshot's splits from `resumed` (None: from its start)."""
    windows = _row_windows(splits)
    if whole:
        yield _Unit(
            0,
            splits,
            sum(_change_rows(s, windows[i]) for i, s in enumerate(splits)),
            frozenset(s.task.data_file.path for s in splits),
            sum(s.estimated_bytes for s in splits),
        )
        return
    first = resumed.split if resumed is not None else 0
    for index in range(first, len(splits)):
        split = splits[index]
        low, high = windows[index]
        if resumed is not None and index == resumed.split:
            low = max(low, resumed.row)
        window = (low, max(high, low))
        cuttable = split.task.kind != FileChangeKind.MODIFIED
        files = frozenset([split.task.data_file.path])
        yield _Unit(index, (split,), _change_rows(split, window), files, split.estimated_bytes, low, cuttable)


def _row_windows(splits: tuple[ChangeSplit, ...]) -> list[tuple[int, int]]:
    """Each split's estimated file rows: its share of the file's row groups (exact for a whole file).

    By row-group count, not bytes: the last row group's bytes include the file's footer, and
    writers mostly cut row groups of equal rows (pyiceberg) or of equal bytes (Spark, Java).
    """
    windows: list[tuple[int, int]] = []
    for split in splits:
        data_file = split.task.data_file
        groups = len(data_file.split_offsets or ())
        if split.row_group_end is None or groups == 0:
            windows.append((0, data_file.record_count))
            continue
        low = data_file.record_count * split.row_group_start // groups
        end = min(split.row_group_end, groups)
        high = data_file.record_count if end == groups else data_file.record_count * end // groups
        windows.append((low, max(high, low)))
    return windows


def _change_rows(split: ChangeSplit, window: tuple[int, int]) -> int:
    """Estimated change rows: every row read, but for a file that gained or lost deletes, its new deletes."""
    rows = window[1] - window[0]
    if split.task.kind != FileChangeKind.MODIFIED:
        return rows
    before = set(split.task.deletes_before)
    changed = sum(d.record_count for d in split.task.deletes_after if d not in before)
    changed += sum(d.record_count for d in split.task.deletes_before if d not in set(split.task.deletes_after))
    return min(rows, changed)


def cut_plan(
    plan: ChangePlan, start: StreamOffset, end: StreamOffset
) -> tuple[ChangePlan, dict[str, Window], set[int]]:
    """The plan of (start, end] read between the offsets' positions, the split windows, and the cut snapshots."""
    cuts = [p for p in (start.position, end.position) if p is not None]
    if not cuts:
        return plan, {}, set()
    index_in_snapshot: dict[int, int] = {}
    kept: list[ChangeSplit] = []
    windows: dict[str, Window] = {}
    seen: set[SnapshotPosition] = set()
    for split in plan.splits:
        snapshot_id = split.task.commit.snapshot_id
        index = index_in_snapshot.get(snapshot_id, 0)
        index_in_snapshot[snapshot_id] = index + 1
        low, high = 0, None
        for position, is_start in ((start.position, True), (end.position, False)):
            if position is None or position.snapshot_id != snapshot_id or index != position.split:
                continue
            if split.split_id != position.split_id:
                break
            seen.add(position)
            if is_start:
                low = position.row
            else:
                high = position.row
        if start.position is not None and start.position.snapshot_id == snapshot_id and index < start.position.split:
            continue
        if end.position is not None and end.position.snapshot_id == snapshot_id:
            if index > end.position.split or (index == end.position.split and end.position.row == 0):
                continue
        kept.append(split)
        if low or high is not None:
            windows[split.split_id] = (low, high)
    for position in cuts:
        if position not in seen:
            raise ConfigError(
                f"the checkpoint's offset names split {position.split} ({position.split_id}) of snapshot "
                f"{position.snapshot_id}, which its plan no longer has (were the options 'filter' or "
                "'branch' changed?); restore the query's options or use a new checkpoint location"
            )
    return replace(plan, splits=tuple(kept)), windows, {p.snapshot_id for p in cuts}
