"""Which chunks of one consumer the Iceberg sink table already holds, read from its snapshot summaries.

Every chunk the sink appends is one snapshot whose summary names the consumer, the chunk id and
its row count. The ledger indexes the table's current history (main branch ancestry) once and
then only the snapshots added on top of the head it last saw, so a replayed chunk is found
without rescanning the whole history on every write.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

CONSUMER_PROPERTY = "icetail.consumer"
CHUNK_ID_PROPERTY = "icetail.chunk-id"
CHUNK_ROWS_PROPERTY = "icetail.chunk-rows"


def chunk_summary(consumer: str, chunk_id: str, rows: int) -> dict[str, str]:
    """The snapshot summary properties that mark a snapshot as `consumer`'s chunk `chunk_id`."""
    return {CONSUMER_PROPERTY: consumer, CHUNK_ID_PROPERTY: chunk_id, CHUNK_ROWS_PROPERTY: str(rows)}


class ChunkLedger:
    """chunk id -> (snapshot id, rows) for one consumer, as of the table's current history."""

    def __init__(self, consumer: str) -> None:
        self.consumer = consumer
        self._chunks: dict[str, tuple[int, int | None]] = {}  # chunk id -> (snapshot id, rows)
        self._head: int | None = None  # current snapshot id when `_chunks` was last brought up to date

    def get(self, chunk_id: str) -> tuple[int, int | None] | None:
        """(snapshot id, rows; None if unrecorded) of the chunk as last indexed, None if not there."""
        return self._chunks.get(chunk_id)

    def index(self, table: Table) -> None:
        """Bring chunk id -> snapshot up to date with the table's current history."""
        current = table.current_snapshot()
        head = current.snapshot_id if current is not None else None
        if head == self._head:
            return
        found: dict[str, tuple[int, int | None]] = {}
        reached_known_head = False
        for snapshot in ancestors_of(current, table.metadata):
            if self._head is not None and snapshot.snapshot_id == self._head:
                reached_known_head = True
                break
            chunk_id = _chunk_of(snapshot, self.consumer)
            if chunk_id is not None:
                found[chunk_id] = (snapshot.snapshot_id, _rows_of(snapshot))
        if reached_known_head:
            self._chunks.update(found)
        else:  # first scan, or the history was rewritten (rollback): start over
            self._chunks = found
        self._head = head

    def committed(self, table: Table, chunk_id: str, rows: int) -> int | None:
        """The id of the snapshot that now holds `chunk_id`, looked up after our own append; None if none does."""
        snapshot = table.current_snapshot()
        if snapshot is None or _chunk_of(snapshot, self.consumer) != chunk_id:
            self._head = None  # someone else's snapshot on top already: index again from scratch
            self.index(table)
            done = self._chunks.get(chunk_id)
            return done[0] if done is not None else None
        self._chunks[chunk_id] = (snapshot.snapshot_id, rows)
        self._head = snapshot.snapshot_id
        return snapshot.snapshot_id


def _chunk_of(snapshot: Snapshot, consumer: str) -> str | None:
    """The chunk id `snapshot` holds for `consumer`; None for anyone else's snapshot."""
    summary = snapshot.summary
    if summary is None or summary.get(CONSUMER_PROPERTY) != consumer:
        return None
    return summary.get(CHUNK_ID_PROPERTY)


def _rows_of(snapshot: Snapshot) -> int | None:
    raw = snapshot.summary.get(CHUNK_ROWS_PROPERTY) if snapshot.summary is not None else None
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
