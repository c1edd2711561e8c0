"""Which chunks of one consumer the Iceberg sink table already holds, read from its snapshot summaries.

Every commit of the sink is one snapshot whose summary names the consumer and the chunks it holds:
one chunk as `icetail.chunk-id` with its row count in `icetail.chunk-rows`, or a group of chunks
committed together as `icetail.chunk-ids` (comma-separated; a chunk name never holds a comma) with
their row counts, in the same order, in `icetail.chunk-rows`. The ledger indexes the table's current
history (main branch ancestry) once and then only the snapshots added on top of the head it last
saw, so a replayed chunk is found without rescanning the whole history on every write.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

CONSUMER_PROPERTY = "icetail.consumer"
CHUNK_ID_PROPERTY = "icetail.chunk-id"
CHUNK_IDS_PROPERTY = "icetail.chunk-ids"
CHUNK_ROWS_PROPERTY = "icetail.chunk-rows"


def chunk_summary(consumer: str, chunks: Sequence[tuple[str, int]]) -> dict[str, str]:
    """The snapshot summary properties that mark a snapshot as holding `consumer`'s `chunks` (id, rows)."""
    if len(chunks) == 1:
        (chunk_id, rows), = chunks
        return {CONSUMER_PROPERTY: consumer, CHUNK_ID_PROPERTY: chunk_id, CHUNK_ROWS_PROPERTY: str(rows)}
    if any("," in chunk_id for chunk_id, _ in chunks):
        raise ValueError(f"a chunk id holds a comma: {[c for c, _ in chunks]}")
    return {
        CONSUMER_PROPERTY: consumer,
        CHUNK_IDS_PROPERTY: ",".join(chunk_id for chunk_id, _ in chunks),
        CHUNK_ROWS_PROPERTY: ",".join(str(rows) for _, rows in chunks),
    }


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
            for chunk_id, rows in _chunks_of(snapshot, self.consumer):
                found[chunk_id] = (snapshot.snapshot_id, rows)
        if reached_known_head:
            self._chunks.update(found)
        else:  # first scan, or the history was rewritten (rollback): start over
            self._chunks = found
        self._head = head

    def committed(self, table: Table, chunks: Sequence[tuple[str, int]]) -> int | None:
        """The id of the snapshot that now holds `chunks` (id, rows), looked up after our own append;
        None if not every one of them is held by that one snapshot."""
        snapshot = table.current_snapshot()
        if snapshot is None or _chunks_of(snapshot, self.consumer) != [(c, r) for c, r in chunks]:
            self._head = None  # someone else's snapshot on top already: index again from scratch
            self.index(table)
            holders = {self._chunks.get(chunk_id, (None, None))[0] for chunk_id, _ in chunks}
            return holders.pop() if len(holders) == 1 else None
        for chunk_id, rows in chunks:
            self._chunks[chunk_id] = (snapshot.snapshot_id, rows)
        self._head = snapshot.snapshot_id
        return snapshot.snapshot_id


def _chunks_of(snapshot: Snapshot, consumer: str) -> list[tuple[str, int | None]]:
    """The chunk ids (with their rows; None where unrecorded) `snapshot` holds for `consumer`; none for
    anyone else's snapshot."""
    summary = snapshot.summary
    if summary is None or summary.get(CONSUMER_PROPERTY) != consumer:
        return []
    rows = [_int_or_none(r) for r in (summary.get(CHUNK_ROWS_PROPERTY) or "").split(",")]
    single = summary.get(CHUNK_ID_PROPERTY)
    if single is not None:
        return [(single, rows[0] if len(rows) == 1 else None)]
    ids = [c for c in (summary.get(CHUNK_IDS_PROPERTY) or "").split(",") if c]
    if len(rows) != len(ids):
        rows = [None] * len(ids)
    return list(zip(ids, rows, strict=True))


def _int_or_none(raw: str) -> int | None:
    try:
        return int(raw)
    except ValueError:
        return None
