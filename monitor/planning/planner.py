"""Plan a snapshot range: lineage -> per-snapshot diff -> splits aligned to parquet row groups.

A split never spans more than `target_split_bytes` of row groups (unless one row group is
bigger), so one huge file becomes many Spark tasks instead of one that stalls everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from icetail.monitor.planning.diff import (
    REPLACE,
    DeleteIndex,
    SnapshotDiffer,
    commit_info,
    global_spec_ids,
    operation_of,
)
from icetail.monitor.planning.lineage import snapshot_by_id, snapshot_or_raise, snapshots_between
from icetail.monitor.planning.manifests import ManifestReader
from icetail.reader.deletes import referenced_data_files
from icetail.reader.fileio import file_io_for
from icetail.state.model import ChangeKind, ChangeSplit, ChangeTask, CommitInfo, DataFileRef, DeleteFileRef

DEFAULT_TARGET_SPLIT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SkippedSnapshot:
    snapshot_id: int
    operation: str
    timestamp_ms: int


@dataclass(frozen=True)
class ChangePlan:
    """Everything needed to read the changes of (from_snapshot_id_exclusive, to_snapshot_id_inclusive]."""

    table: str
    from_snapshot_id_exclusive: int | None
    to_snapshot_id_inclusive: int | None
    schema_id: int | None
    commits: tuple[CommitInfo, ...]
    skipped: tuple[SkippedSnapshot, ...]
    tasks: tuple[ChangeTask, ...]
    splits: tuple[ChangeSplit, ...] = field(default=())
    manifests_read: int = 0


class Planner:
    """Plans ranges of one table; keeps its manifest cache across calls (serve mode reuses it)."""

    def __init__(
        self, table: Table, target_split_bytes: int = DEFAULT_TARGET_SPLIT_BYTES, *, early_stop: bool = True
    ) -> None:
        """`early_stop=False`: always decode a new snapshot's whole manifest list (see ManifestReader)."""
        self._table = table
        self._target_split_bytes = target_split_bytes
        self._io = table.io
        self._manifests = ManifestReader(table.io, early_stop=early_stop)
        self._path_cache: dict[str, frozenset[str]] = {}

    def refresh(self, table: Table) -> None:
        """Use newer metadata of the same table, keeping the manifest cache."""
        self._table = table

    @property
    def table(self) -> Table:
        return self._table

    def plan(
        self, from_snapshot_id_exclusive: int | None, to_snapshot_id_inclusive: int | None, *, ordinal_base: int = 0
    ) -> ChangePlan:
        """Plan the range; the first non-replace snapshot gets `_change_ordinal` = `ordinal_base`."""
        metadata = self._table.metadata
        name = ".".join(self._table.name())
        if to_snapshot_id_inclusive is None:
            to_snapshot_id_inclusive = metadata.current_snapshot_id
        if to_snapshot_id_inclusive is None or to_snapshot_id_inclusive == from_snapshot_id_exclusive:
            return ChangePlan(
                name, from_snapshot_id_exclusive, to_snapshot_id_inclusive, metadata.current_schema_id, (), (), ()
            )
        before = self._manifests.manifests_read
        chain = snapshots_between(metadata, from_snapshot_id_exclusive, to_snapshot_id_inclusive)
        differ = SnapshotDiffer(metadata, self._manifests, self._resolve_paths)
        commits: list[CommitInfo] = []
        skipped: list[SkippedSnapshot] = []
        tasks: list[ChangeTask] = []
        for snapshot in chain:
            operation = operation_of(snapshot)
            if operation == REPLACE:
                skipped.append(SkippedSnapshot(snapshot.snapshot_id, operation, snapshot.timestamp_ms))
                continue
            result = differ.diff(snapshot, ordinal_base + len(commits))
            commits.append(result.commit)
            tasks.extend(result.tasks)
        to_snapshot = snapshot_by_id(metadata, to_snapshot_id_inclusive)
        schema_id = to_snapshot.schema_id if to_snapshot is not None and to_snapshot.schema_id is not None else None
        if schema_id is None:
            schema_id = metadata.current_schema_id
        return ChangePlan(
            table=name,
            from_snapshot_id_exclusive=from_snapshot_id_exclusive,
            to_snapshot_id_inclusive=to_snapshot_id_inclusive,
            schema_id=schema_id,
            commits=tuple(commits),
            skipped=tuple(skipped),
            tasks=tuple(tasks),
            splits=tuple(s for t in tasks for s in split_task(t, self._target_split_bytes)),
            manifests_read=self._manifests.manifests_read - before,
        )

    def plan_full(self, snapshot_id_inclusive: int | None = None, *, ordinal_base: int = 0) -> ChangePlan:
        """The rows of one snapshot as INSERTs (Flink's TABLE_SCAN_THEN_INCREMENTAL first step).

        The result is a range (None, snapshot] whose single commit is the snapshot itself.
        """
        metadata = self._table.metadata
        snapshot_id = snapshot_id_inclusive if snapshot_id_inclusive is not None else metadata.current_snapshot_id
        name = ".".join(self._table.name())
        if snapshot_id is None:
            return ChangePlan(name, None, None, metadata.current_schema_id, (), (), ())
        snapshot = snapshot_or_raise(metadata, snapshot_id, "start")
        before = self._manifests.manifests_read
        commit = commit_info(snapshot, ordinal_base)
        deletes = [
            e.file for e in self._manifests.live(snapshot, ManifestContent.DELETES) if isinstance(e.file, DeleteFileRef)
        ]
        index = DeleteIndex(deletes, self._resolve_paths, global_spec_ids(metadata))
        tasks = tuple(
            ChangeTask(e.file, ChangeKind.ADDED, commit, deletes_after=index.for_file(e.file))
            for e in self._manifests.live(snapshot, ManifestContent.DATA)
            if isinstance(e.file, DataFileRef)
        )
        return ChangePlan(
            table=name,
            from_snapshot_id_exclusive=None,
            to_snapshot_id_inclusive=snapshot_id,
            schema_id=snapshot.schema_id if snapshot.schema_id is not None else metadata.current_schema_id,
            commits=(commit,),
            skipped=(),
            tasks=tasks,
            splits=tuple(s for t in tasks for s in split_task(t, self._target_split_bytes)),
            manifests_read=self._manifests.manifests_read - before,
        )

    def _resolve_paths(self, delete: DeleteFileRef) -> frozenset[str]:
        if delete.referenced_data_file:
            return frozenset([delete.referenced_data_file])
        cached = self._path_cache.get(delete.path)
        if cached is None:
            cached = referenced_data_files(file_io_for(self._io.properties), delete)
            self._path_cache[delete.path] = cached
        return cached


def split_task(task: ChangeTask, target_split_bytes: int) -> list[ChangeSplit]:
    """Group consecutive row groups into splits of about `target_split_bytes`."""
    data_file = task.data_file
    offsets = data_file.split_offsets
    if not offsets or len(offsets) == 1 or data_file.file_size_in_bytes <= target_split_bytes:
        return [ChangeSplit(task, 0, None, data_file.record_count, data_file.file_size_in_bytes)]
    bounds = [*offsets, data_file.file_size_in_bytes]
    sizes = [max(bounds[i + 1] - bounds[i], 0) for i in range(len(offsets))]
    splits: list[ChangeSplit] = []
    start, acc = 0, 0
    for index, size in enumerate(sizes):
        if acc and acc + size > target_split_bytes:
            splits.append(_split(task, start, index, acc))
            start, acc = index, 0
        acc += size
    splits.append(_split(task, start, len(sizes), acc))
    return splits


def _split(task: ChangeTask, start: int, end: int, size: int) -> ChangeSplit:
    data_file = task.data_file
    rows = data_file.record_count * size // max(data_file.file_size_in_bytes, 1)
    return ChangeSplit(task, start, end, rows, size)


__all__ = ["ChangePlan", "Planner", "SkippedSnapshot", "split_task", "commit_info"]
