"""Snapshot ancestry as small pure functions over table metadata.

Ranges are (from_snapshot_id_exclusive, to_snapshot_id_inclusive], as in pyiceberg's
IncrementalAppendScan and Iceberg's changelog scan.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from enum import Enum

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.errors import NotAncestorError, SnapshotNotFoundError

# snapshots by id, one index per TableMetadata object, dropped with it
_indexes: dict[int, tuple[weakref.ref[TableMetadata], int, dict[int, Snapshot]]] = {}


def _index_dropper(key: int) -> Callable[[weakref.ref[TableMetadata]], None]:
    def drop(_: weakref.ref[TableMetadata]) -> None:
        _indexes.pop(key, None)

    return drop


def snapshot_by_id(metadata: TableMetadata, snapshot_id: int) -> Snapshot | None:
    """`metadata.snapshot_by_id` in O(1).

    pyiceberg's lookup scans the snapshot list, so walking an ancestry with it costs
    O(history) per step. The index is built once per metadata object: pyiceberg's metadata is
    frozen, and a refreshed table is a new object with a new index.
    """
    key = id(metadata)
    cached = _indexes.get(key)
    snapshots = metadata.snapshots
    if cached is None or cached[0]() is not metadata or cached[1] != len(snapshots):
        # reversed: on a (malformed) repeated id the first snapshot wins, as in pyiceberg
        index = {s.snapshot_id: s for s in reversed(snapshots)}
        cached = (weakref.ref(metadata, _index_dropper(key)), len(snapshots), index)
        _indexes[key] = cached
    return cached[2].get(snapshot_id)


def snapshot_or_raise(metadata: TableMetadata, snapshot_id: int, role: str) -> Snapshot:
    snapshot = snapshot_by_id(metadata, snapshot_id)
    if snapshot is None:
        raise SnapshotNotFoundError(
            f"{role} snapshot {snapshot_id} is not in the table metadata (expired or never existed); "
            "pick a snapshot listed by `icetail plan` or another start"
        )
    return snapshot


class HistoryExpiredError(SnapshotNotFoundError):
    """The history before `oldest_kept` (the oldest snapshot still on the chain) has expired, so a
    range from before the first snapshot cannot be read: it would silently miss the rows that
    snapshot inherited. Callers add the fix that works for them (`--from-snapshot`, a reset)."""

    @property
    def oldest_kept(self) -> int:
        return int(self.args[1])


def history_expired_before(metadata: TableMetadata, to_snapshot_id_inclusive: int) -> Snapshot | None:
    """The oldest snapshot on `to`'s chain when the history before it has expired, else None.

    Expired history shows two ways: a parent id left dangling (Java's expiry), or a cleared parent
    id (pyiceberg's expiry) on a snapshot whose summary counts more files or rows in the table than
    it added, so rows it inherited would never be read. A root that added everything it holds (a
    table's first snapshot, a replaced table's new root) is a true start.
    """
    snapshot = snapshot_or_raise(metadata, to_snapshot_id_inclusive, "to")
    while snapshot.parent_snapshot_id is not None:
        parent = snapshot_by_id(metadata, snapshot.parent_snapshot_id)
        if parent is None:
            return snapshot
        snapshot = parent
    return snapshot if not _could_be_first(snapshot) else None


def _could_be_first(snapshot: Snapshot) -> bool:
    summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    for total, added in (("total-data-files", "added-data-files"), ("total-records", "added-records")):
        if total in summary and int(summary[total]) > int(summary.get(added, 0)):
            return False
    return True


def snapshots_between(
    metadata: TableMetadata, from_snapshot_id_exclusive: int | None, to_snapshot_id_inclusive: int
) -> list[Snapshot]:
    """Ancestors of `to` back to (not including) `from`, oldest first.

    Raises NotAncestorError when `from` is given but not on `to`'s ancestry (a rollback or a
    different branch), naming both snapshot ids; HistoryExpiredError when `from` is before the
    first snapshot (None) but the history before the oldest kept snapshot has expired.
    """
    if from_snapshot_id_exclusive is None:
        oldest = history_expired_before(metadata, to_snapshot_id_inclusive)
        if oldest is not None:
            raise HistoryExpiredError(
                f"the history before snapshot {oldest.snapshot_id} (an ancestor of {to_snapshot_id_inclusive}) has "
                f"expired, so it cannot be read from before the first snapshot: start after a kept snapshot "
                f"(e.g. --from-snapshot {oldest.snapshot_id})",
                oldest.snapshot_id,
            )
    else:
        snapshot_or_raise(metadata, from_snapshot_id_exclusive, "from")
    chain: list[Snapshot] = []
    snapshot: Snapshot | None = snapshot_or_raise(metadata, to_snapshot_id_inclusive, "to")
    while snapshot is not None and snapshot.snapshot_id != from_snapshot_id_exclusive:
        chain.append(snapshot)
        parent_id = snapshot.parent_snapshot_id
        snapshot = snapshot_by_id(metadata, parent_id) if parent_id is not None else None
    if from_snapshot_id_exclusive is not None and snapshot is None:
        raise NotAncestorError(
            f"snapshot {from_snapshot_id_exclusive} is not an ancestor of snapshot {to_snapshot_id_inclusive} "
            "(rolled back or on another branch); choose a from-snapshot on the to-snapshot's history"
        )
    chain.reverse()
    return chain


def is_ancestor(metadata: TableMetadata, ancestor_id: int, snapshot_id: int) -> bool:
    """True when `ancestor_id` is `snapshot_id` or one of its ancestors."""
    snapshot = snapshot_by_id(metadata, snapshot_id)
    while snapshot is not None:
        if snapshot.snapshot_id == ancestor_id:
            return True
        parent_id = snapshot.parent_snapshot_id
        snapshot = snapshot_by_id(metadata, parent_id) if parent_id is not None else None
    return False


class CursorCondition(str, Enum):
    """Why a cursor cannot be continued snapshot by snapshot; each needs a different action."""

    CURSOR_EXPIRED = "cursor_expired"  # the cursor snapshot is gone from the metadata (no tag kept it)
    CHAIN_EXPIRED = "chain_expired"  # the cursor is there, but expiry removed snapshots after it
    NOT_DESCENDANT = "not_descendant"  # the current snapshot does not descend from it (rollback, branch reset)


def cursor_condition(metadata: TableMetadata, cursor_snapshot_id: int | None) -> CursorCondition | None:
    """None when the current snapshot's ancestry reaches the cursor (or there is nothing to follow).

    Walking back from the current snapshot ends at the cursor (fine) or at the oldest snapshot
    still reachable. If that one's parent is missing (Java's expiry leaves the parent id
    dangling) or absent (pyiceberg's expiry clears it), the cursor may have been an ancestor
    whose successors expired: it was one if it is older than that snapshot (sequence numbers,
    or commit times on v1 tables, grow along a chain), else the current history never passed
    through it (a rollback). A new root that is not the result of expiry (a replaced table)
    also reads as CHAIN_EXPIRED; the direct diff that answers it is right for both.
    """
    if cursor_snapshot_id is None:
        # "before the first snapshot" is older than any kept snapshot: lost when that history expired
        current = metadata.current_snapshot_id
        expired = current is not None and history_expired_before(metadata, current) is not None
        return CursorCondition.CHAIN_EXPIRED if expired else None
    cursor = snapshot_by_id(metadata, cursor_snapshot_id)
    if cursor is None:
        return CursorCondition.CURSOR_EXPIRED
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return None
    while snapshot.snapshot_id != cursor_snapshot_id:
        parent_id = snapshot.parent_snapshot_id
        parent = snapshot_by_id(metadata, parent_id) if parent_id is not None else None
        if parent is None:
            return CursorCondition.CHAIN_EXPIRED if _older(cursor, snapshot) else CursorCondition.NOT_DESCENDANT
        snapshot = parent
    return None


def _older(a: Snapshot, b: Snapshot) -> bool:
    """`a` was committed before `b` (sequence numbers when both have one, else commit times)."""
    if a.sequence_number and b.sequence_number:
        return a.sequence_number < b.sequence_number
    return a.timestamp_ms <= b.timestamp_ms


def undelivered_snapshots(metadata: TableMetadata, cursor_snapshot_id: int | None) -> list[Snapshot]:
    """Snapshots after the cursor up to the current one, oldest first; [] when caught up."""
    current = metadata.current_snapshot_id
    if current is None or current == cursor_snapshot_id:
        return []
    return snapshots_between(metadata, cursor_snapshot_id, current)


def age_seconds(pending: list[Snapshot], now_seconds: float) -> float:
    """Lag in seconds: the age of the oldest undelivered snapshot, 0 when there is none."""
    return max(0.0, now_seconds - pending[0].timestamp_ms / 1000) if pending else 0.0


def snapshot_as_of(metadata: TableMetadata, timestamp_ms: int) -> Snapshot | None:
    """The newest snapshot of the current history committed at or before `timestamp_ms`; None: before the first."""
    snapshot: Snapshot | None = metadata.current_snapshot()
    while snapshot is not None:
        if snapshot.timestamp_ms <= timestamp_ms:
            return snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = snapshot_by_id(metadata, parent) if parent is not None else None
    return None
