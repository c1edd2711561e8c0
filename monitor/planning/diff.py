"""Snapshot diff: a snapshot range becomes change tasks, one per data file whose visible rows changed.

For each non-replace snapshot S with parent P (see docs/semantics.md):
- data files ADDED in S: rows visible at S are INSERTs;
- data files REMOVED in S: rows visible at P are DELETEs;
- data files live at both whose applicable delete files differ: the difference of the rows visible.
Only the manifests S wrote are read, plus P's delete manifests and S's data manifests when
delete files changed; the manifest cache makes repeated reads free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.model import ChangeTask, CommitInfo, DataFileRef, DeleteContent, DeleteFileRef, FileChangeKind
from icetail.monitor.planning.delete_index import DeleteIndex, PathResolver, delete_identity, global_spec_ids
from icetail.monitor.planning.lineage import snapshot_by_id
from icetail.monitor.planning.manifest_entries import FileEntry
from icetail.monitor.planning.manifests import ManifestReader

REPLACE = "replace"
COLLAPSED = "collapsed"  # the operation of a direct diff's one commit: the history between was collapsed


@dataclass(frozen=True)
class SnapshotDiff:
    commit: CommitInfo
    tasks: tuple[ChangeTask, ...]


def as_read_at(data_file: DataFileRef, parent: Snapshot | None) -> DataFileRef:
    """`data_file` with the row lineage its rows had at `parent`, the snapshot its DELETEs are read at.

    A snapshot from before a v3 upgrade has no `first-row-id`: its rows have no `_row_id` (the
    spec's Row Lineage for Upgraded Tables), though the first v3 commit assigns the same files
    ids in its own manifests, which is where a removed or modified file's entry is read from.
    """
    if data_file.first_row_id is None or (parent is not None and parent.first_row_id is not None):
        return data_file
    return replace(data_file, first_row_id=None)


def commit_info(snapshot: Snapshot, ordinal: int, metadata: TableMetadata) -> CommitInfo:
    return CommitInfo(
        snapshot_id=snapshot.snapshot_id,
        parent_id=snapshot.parent_snapshot_id,
        operation=operation_of(snapshot),
        timestamp_ms=snapshot.timestamp_ms,
        sequence_number=snapshot.sequence_number or 0,
        ordinal=ordinal,
        schema_id=snapshot_schema_id(snapshot, metadata),
    )


def snapshot_schema_id(snapshot: Snapshot, metadata: TableMetadata) -> int:
    """The schema `snapshot` was written with; the table's current one when it records none (v1)."""
    return snapshot.schema_id if snapshot.schema_id is not None else metadata.current_schema_id


def operation_of(snapshot: Snapshot) -> str:
    summary = snapshot.summary
    if summary is None:
        return "unknown"
    op = summary.operation
    return str(op.value if hasattr(op, "value") else op)


class SnapshotDiffer:
    """Turns one snapshot into change tasks; holds the manifest cache and table layout."""

    def __init__(self, metadata: TableMetadata, manifests: ManifestReader, resolve_paths: PathResolver) -> None:
        self._metadata = metadata
        self._manifests = manifests
        self._resolve_paths = resolve_paths
        self._global_spec_ids = global_spec_ids(metadata)

    def diff(self, snapshot: Snapshot, ordinal: int, added: list[FileEntry] | None = None) -> SnapshotDiff:
        """`added`: the snapshot's `ManifestReader.added_in` when the caller read it ahead."""
        commit = commit_info(snapshot, ordinal, self._metadata)
        entries = added if added is not None else self._manifests.added_in(snapshot)
        data_added = _files(entries, DataFileRef, ManifestEntryStatus.ADDED)
        data_removed = _files(entries, DataFileRef, ManifestEntryStatus.DELETED)
        deletes_added = _files(entries, DeleteFileRef, ManifestEntryStatus.ADDED)
        deletes_removed = _files(entries, DeleteFileRef, ManifestEntryStatus.DELETED)

        if not (data_removed or deletes_added or deletes_removed):
            # pure append: nothing older than S can delete rows of files added in S
            return SnapshotDiff(commit, tuple(ChangeTask(f, FileChangeKind.ADDED, commit) for f in data_added))

        parent = self._parent(snapshot)
        live_before = (
            [e.file for e in self._manifests.live(parent, ManifestContent.DELETES) if isinstance(e.file, DeleteFileRef)]
            if parent is not None
            else []
        )
        # a Puffin file holds the DVs of many data files: identify a delete by file AND blob offset
        removed = {delete_identity(d) for d in deletes_removed}
        live_after = [d for d in live_before if delete_identity(d) not in removed] + deletes_added
        before = DeleteIndex(live_before, self._resolve_paths, self._global_spec_ids)
        after = DeleteIndex(live_after, self._resolve_paths, self._global_spec_ids)

        tasks = [ChangeTask(f, FileChangeKind.ADDED, commit, deletes_after=after.for_file(f)) for f in data_added]
        tasks += [
            ChangeTask(as_read_at(f, parent), FileChangeKind.REMOVED, commit, deletes_before=before.for_file(f))
            for f in data_removed
        ]
        modified = self._modified(snapshot, commit, deletes_added + deletes_removed, data_added, before, after)
        tasks += [replace(t, data_file=as_read_at(t.data_file, parent)) for t in modified]
        return SnapshotDiff(commit, tuple(tasks))

    def _modified(
        self,
        snapshot: Snapshot,
        commit: CommitInfo,
        changed_deletes: list[DeleteFileRef],
        data_added: list[DataFileRef],
        before: DeleteIndex,
        after: DeleteIndex,
    ) -> list[ChangeTask]:
        """Data files live before and after S whose applicable delete files changed in S."""
        touched: set[str] = set()
        equality_changed = [d for d in changed_deletes if d.content == DeleteContent.EQUALITY]
        for delete in changed_deletes:
            if delete.content != DeleteContent.EQUALITY:
                touched |= self._resolve_paths(delete)
        if not touched and not equality_changed:
            return []
        added_paths = {f.path for f in data_added}
        live_data = {
            e.file.path: e.file
            for e in self._manifests.live(snapshot, ManifestContent.DATA)
            if isinstance(e.file, DataFileRef) and e.file.path not in added_paths
        }
        candidates = {p: live_data[p] for p in touched if p in live_data}
        if equality_changed:
            for data_file in live_data.values():
                if data_file.path not in candidates and any(
                    d.data_sequence_number > data_file.data_sequence_number for d in equality_changed
                ):
                    candidates[data_file.path] = data_file
        tasks = []
        for path in sorted(candidates):
            data_file = candidates[path]
            deletes_before, deletes_after = before.for_file(data_file), after.for_file(data_file)
            if deletes_before != deletes_after:
                tasks.append(ChangeTask(data_file, FileChangeKind.MODIFIED, commit, deletes_before, deletes_after))
        return tasks

    def _parent(self, snapshot: Snapshot) -> Snapshot | None:
        if snapshot.parent_snapshot_id is None:
            return None
        return snapshot_by_id(self._metadata, snapshot.parent_snapshot_id)


def _files(entries: list[FileEntry], kind: type, status: ManifestEntryStatus) -> list:  # type: ignore[type-arg]
    return [e.file for e in entries if isinstance(e.file, kind) and e.status == status]
