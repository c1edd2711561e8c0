"""Plan a snapshot range: lineage -> per-snapshot diff -> splits aligned to parquet row groups.

A split never spans more than `target_split_bytes` of row groups (unless one row group is
bigger), so one huge file becomes many Spark tasks instead of one that stalls everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.lru import LRU
from icetail.kernel.model import ChangeSplit, ChangeTask, CommitInfo, DataFileRef, DeleteFileRef, FileChangeKind
from icetail.kernel.settings import DEFAULT_MANIFEST_CACHE_ENTRIES, DEFAULT_TARGET_SPLIT_BYTES, MAIN_BRANCH
from icetail.monitor.planning.delete_index import DeleteIndex, global_spec_ids
from icetail.monitor.planning.diff import (
    COLLAPSED,
    REPLACE,
    SnapshotDiffer,
    as_read_at,
    commit_info,
    operation_of,
    snapshot_schema_id,
)
from icetail.monitor.planning.lineage import snapshot_by_id, snapshot_or_raise, snapshots_between
from icetail.monitor.planning.manifests import DEFAULT_PLANNING_THREADS, ManifestReader, shared_manifest_cache
from icetail.monitor.planning.pruning import FilePruner
from icetail.reader.split.deletes import referenced_data_files
from icetail.reader.split.fileio import file_io_for

MAX_CACHED_DELETE_FILES = 4096  # position delete files whose referenced data files a planner remembers


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
    collapsed: bool = False  # a direct diff: the history between from and to was collapsed into one commit
    branch: str = MAIN_BRANCH  # the ref whose history the range is on
    from_tag: str | None = None  # the tag the range starts after, when it was given by tag
    to_tag: str | None = None  # the tag the range ends at, when it was given by tag
    files_pruned: int = 0  # data file tasks a row filter proved hold no matching row (not read)


class Planner:
    """Plans ranges of one table; keeps its manifest cache across calls (serve mode reuses it)."""

    def __init__(
        self,
        table: Table,
        target_split_bytes: int = DEFAULT_TARGET_SPLIT_BYTES,
        *,
        early_stop: bool = True,
        branch: str = MAIN_BRANCH,
        row_filter: str | None = None,
        manifest_cache_entries: int = DEFAULT_MANIFEST_CACHE_ENTRIES,
        planning_threads: int = DEFAULT_PLANNING_THREADS,
        share_manifest_cache: bool = False,
    ) -> None:
        """`early_stop=False`: always decode a new snapshot's whole manifest list (see ManifestReader).

        `row_filter` (reader/split/row_filter.py): plans leave out the data files whose partition or
        column bounds prove they hold no matching row (planning/pruning.py).

        `branch` names the ref whose head is `table`'s current snapshot (see refs.table_on_branch);
        plans carry it so that reports say which history they are on.

        `manifest_cache_entries` bounds the decoded manifests kept across plans (serve keeps one
        Planner per consumer); with `share_manifest_cache` the bound is the process's, one cache
        for every planner that shares (manifests.shared_manifest_cache; not with a row filter).
        `planning_threads` reads that many manifests at once (manifests.py).
        """
        self._table = table
        self._branch = branch
        self._target_split_bytes = target_split_bytes
        self._io = table.io
        pruner = FilePruner(table.metadata, row_filter) if row_filter is not None else None
        self._manifests = ManifestReader(
            table.io,
            manifest_cache_entries,
            early_stop=early_stop,
            may_match=pruner.may_match if pruner is not None else None,
            threads=planning_threads,
            cache=shared_manifest_cache(manifest_cache_entries) if share_manifest_cache else None,
        )
        # data files each position delete file names, by its path: bounded, as the manifest caches
        # are, so a `serve` that sees delete files for months keeps a fixed amount (issue 24 §4)
        self._path_cache: LRU[str, frozenset[str]] = LRU(MAX_CACHED_DELETE_FILES)

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
                name,
                from_snapshot_id_exclusive,
                to_snapshot_id_inclusive,
                metadata.current_schema_id,
                (),
                (),
                (),
                branch=self._branch,
            )
        before = self._manifests.manifests_read
        chain = snapshots_between(metadata, from_snapshot_id_exclusive, to_snapshot_id_inclusive)
        differ = SnapshotDiffer(metadata, self._manifests, self._resolve_paths)
        commits: list[CommitInfo] = []
        skipped: list[SkippedSnapshot] = []
        diffed: list[ChangeTask] = []
        # the manifests each snapshot wrote, read a few snapshots ahead on threads, handed over in order
        added = self._manifests.added_in_each([s for s in chain if operation_of(s) != REPLACE])
        for snapshot in chain:
            operation = operation_of(snapshot)
            if operation == REPLACE:
                skipped.append(SkippedSnapshot(snapshot.snapshot_id, operation, snapshot.timestamp_ms))
                continue
            result = differ.diff(snapshot, ordinal_base + len(commits), next(added))
            commits.append(result.commit)
            diffed.extend(result.tasks)
        tasks, pruned = self._unpruned(diffed)
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
            tasks=tasks,
            splits=tuple(s for t in tasks for s in split_task(t, self._target_split_bytes)),
            manifests_read=self._manifests.manifests_read - before,
            branch=self._branch,
            files_pruned=pruned,
        )

    def plan_full(self, snapshot_id_inclusive: int | None = None, *, ordinal_base: int = 0) -> ChangePlan:
        """The rows of one snapshot as INSERTs (Flink's TABLE_SCAN_THEN_INCREMENTAL first step).

        The result is a range (None, snapshot] whose single commit is the snapshot itself.
        """
        metadata = self._table.metadata
        snapshot_id = snapshot_id_inclusive if snapshot_id_inclusive is not None else metadata.current_snapshot_id
        name = ".".join(self._table.name())
        if snapshot_id is None:
            return ChangePlan(name, None, None, metadata.current_schema_id, (), (), (), branch=self._branch)
        snapshot = snapshot_or_raise(metadata, snapshot_id, "start")
        before = self._manifests.manifests_read
        commit = commit_info(snapshot, ordinal_base, metadata)
        deletes = [
            e.file for e in self._manifests.live(snapshot, ManifestContent.DELETES) if isinstance(e.file, DeleteFileRef)
        ]
        index = DeleteIndex(deletes, self._resolve_paths, global_spec_ids(metadata))
        tasks, pruned = self._unpruned(
            ChangeTask(e.file, FileChangeKind.ADDED, commit, deletes_after=index.for_file(e.file))
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
            branch=self._branch,
            files_pruned=pruned,
        )

    def plan_direct(
        self, from_snapshot_id_exclusive: int, to_snapshot_id_inclusive: int, *, ordinal_base: int = 0
    ) -> ChangePlan:
        """The net change from one snapshot to another as ONE commit, without walking the history between.

        For when that history is gone (expired) or is not a history at all (a rollback). Data
        files live at both snapshots with the same applicable delete files are skipped unread;
        the rest become tasks whose before side is the from-snapshot and after side the
        to-snapshot, exactly as one snapshot's diff (docs/delivery.md, "Repair by a direct diff").
        The commit is the to-snapshot's id and time, with the from-snapshot as its parent.
        """
        metadata = self._table.metadata
        name = ".".join(self._table.name())
        start = snapshot_or_raise(metadata, from_snapshot_id_exclusive, "cursor")
        end = snapshot_or_raise(metadata, to_snapshot_id_inclusive, "current")
        before_read = self._manifests.manifests_read
        commit = replace(commit_info(end, ordinal_base, metadata), parent_id=start.snapshot_id, operation=COLLAPSED)
        spec_ids = global_spec_ids(metadata)
        data_before, index_before = self._live_files(start, spec_ids)
        data_after, index_after = self._live_files(end, spec_ids)
        tasks: list[ChangeTask] = []
        for path in sorted(data_before.keys() | data_after.keys()):
            old, new = data_before.get(path), data_after.get(path)
            if new is None:
                assert old is not None
                deletes_of_old = index_before.for_file(old)
                removed = as_read_at(old, start)
                tasks.append(ChangeTask(removed, FileChangeKind.REMOVED, commit, deletes_before=deletes_of_old))
            elif old is None:
                tasks.append(ChangeTask(new, FileChangeKind.ADDED, commit, deletes_after=index_after.for_file(new)))
            else:
                deletes_before, deletes_after = index_before.for_file(old), index_after.for_file(new)
                if deletes_before != deletes_after:
                    modified = as_read_at(new, start)
                    tasks.append(ChangeTask(modified, FileChangeKind.MODIFIED, commit, deletes_before, deletes_after))
        kept, pruned = self._unpruned(tasks)
        return ChangePlan(
            table=name,
            from_snapshot_id_exclusive=start.snapshot_id,
            to_snapshot_id_inclusive=end.snapshot_id,
            schema_id=end.schema_id if end.schema_id is not None else metadata.current_schema_id,
            commits=(commit,),
            skipped=(),
            tasks=kept,
            splits=tuple(s for t in kept for s in split_task(t, self._target_split_bytes)),
            manifests_read=self._manifests.manifests_read - before_read,
            collapsed=True,
            branch=self._branch,
            files_pruned=pruned,
        )

    def _unpruned(self, tasks: Iterable[ChangeTask]) -> tuple[tuple[ChangeTask, ...], int]:
        """The tasks whose data file may hold rows the row filter selects, and how many were left out."""
        pruned = self._manifests.pruned_paths
        every = tuple(tasks)
        kept = tuple(t for t in every if t.data_file.path not in pruned) if pruned else every
        return kept, len(every) - len(kept)

    def _live_files(self, snapshot: Snapshot, spec_ids: frozenset[int]) -> tuple[dict[str, DataFileRef], DeleteIndex]:
        """Data files live at `snapshot` by path, and the index of its live delete files."""
        data = {
            e.file.path: e.file
            for e in self._manifests.live(snapshot, ManifestContent.DATA)
            if isinstance(e.file, DataFileRef)
        }
        deletes = [
            e.file for e in self._manifests.live(snapshot, ManifestContent.DELETES) if isinstance(e.file, DeleteFileRef)
        ]
        return data, DeleteIndex(deletes, self._resolve_paths, spec_ids)

    def _resolve_paths(self, delete: DeleteFileRef) -> frozenset[str]:
        if delete.referenced_data_file:
            return frozenset([delete.referenced_data_file])
        cached = self._path_cache.get(delete.path)
        if cached is None:
            cached = referenced_data_files(file_io_for(self._io.properties), delete)
            self._path_cache.put(delete.path, cached)
        return cached


def same_schema_prefix(metadata: TableMetadata, chain: Sequence[Snapshot]) -> list[Snapshot]:
    """The leading snapshots of `chain` (oldest first) written with the first one's schema.

    A batch of `run`/`serve` ends before the first snapshot whose schema id differs, so each
    batch holds one schema: its rows are exactly what a reader of its snapshots sees, and a sink
    learns of the schema change between two batches (docs/semantics.md, "Schema changes").
    """
    if not chain:
        return []
    first = snapshot_schema_id(chain[0], metadata)
    end = next((i for i, s in enumerate(chain) if snapshot_schema_id(s, metadata) != first), len(chain))
    return list(chain[:end])


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


__all__ = ["ChangePlan", "Planner", "SkippedSnapshot", "same_schema_prefix", "split_task", "commit_info"]
