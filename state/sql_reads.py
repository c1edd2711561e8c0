"""Reads of the SQL checkpoint store: a consumer's checkpoint, its history, every consumer.

Each read is one snapshot of the database (one read transaction), so a checkpoint's cursor,
lease and batch in flight are always seen together.
"""

from __future__ import annotations

from icetail.kernel.errors import StateError
from icetail.kernel.settings import HISTORY_LIMIT
from icetail.state.backend import Tx
from icetail.state.checkpoint import (
    Checkpoint,
    ConsumerSummary,
    Cursor,
    HistoryEntry,
    Inflight,
    Lease,
    SplitProgress,
)
from icetail.state.codec import decode_split
from icetail.state.sql_core import SqlStoreCore
from icetail.state.sql_rows import HISTORY_COLUMNS, BatchHeader, history_entry


class SqlReads(SqlStoreCore):
    """load, history and list_consumers: they change nothing."""

    def load(self, consumer: str) -> Checkpoint | None:
        return self._read(lambda tx: self._load(tx, consumer))

    def _load(self, tx: Tx, consumer: str) -> Checkpoint | None:
        row = self._consumer_row(tx, consumer, lock=False)
        if row is None:
            return None
        header = self._batch_header(tx, consumer)
        inflight = None if header is None else self._inflight(tx, consumer, header)
        return Checkpoint(
            consumer=consumer,
            catalog=row.catalog,
            table=row.table,
            cursor=row.cursor,
            generation=row.generation,
            lease=row.lease,
            inflight=inflight,
            as_of_ms=row.now_ms,
            sink=row.sink,
            branch=row.branch,
        )

    def _inflight(self, tx: Tx, consumer: str, header: BatchHeader) -> Inflight:
        rows = tx.query(
            "SELECT split_id, split_json, next_row_exclusive, rows_emitted, done, sink_token, parts_done, parts_key "
            "FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ? ORDER BY ordinal",
            (consumer, header.batch_id),
        )
        if len(rows) != header.split_count:
            raise StateError(
                f"batch {header.batch_id} of consumer {consumer} should have {header.split_count} splits "
                f"but {len(rows)} are stored; the checkpoint store is damaged"
            )
        splits = tuple(decode_split(text, expected_split_id=sid) for sid, text, *_ in rows)
        progress = tuple(
            SplitProgress(
                split_id=sid,
                next_row_exclusive=nxt,
                rows_emitted=int(n),
                done=bool(done),
                sink_token=tok,
                parts_done=None if parts is None else int(parts),
                parts_key=parts_key,
            )
            for sid, _, nxt, n, done, tok, parts, parts_key in rows
        )
        return Inflight(batch=header.batch(splits), created_at_ms=header.created_at_ms, progress=progress)

    def history(self, consumer: str, limit: int = HISTORY_LIMIT) -> tuple[HistoryEntry, ...]:
        if limit < 0:
            raise ValueError("limit must not be negative")

        def work(tx: Tx) -> tuple[HistoryEntry, ...]:
            self._require(tx, consumer, lock=False)
            rows = tx.query(
                f"SELECT {HISTORY_COLUMNS} FROM icetail_history WHERE consumer = ? ORDER BY seq DESC LIMIT ?",
                (consumer, limit),
            )
            return tuple(history_entry(r) for r in rows)

        return self._read(work)

    def list_consumers(self) -> tuple[ConsumerSummary, ...]:
        def work(tx: Tx) -> tuple[ConsumerSummary, ...]:
            rows = tx.query(
                "SELECT c.consumer, c.catalog_name, c.table_name, c.cursor_snapshot_id, c.cursor_timestamp_ms, "
                "c.generation, c.lease_owner, c.lease_expires_at_ms, b.batch_id, c.sink_url, c.branch "
                "FROM icetail_consumers c LEFT JOIN icetail_inflight_batches b ON b.consumer = c.consumer "
                "ORDER BY c.consumer"
            )
            return tuple(
                ConsumerSummary(
                    consumer=r[0],
                    catalog=r[1],
                    table=r[2],
                    cursor=Cursor(r[3], r[4]),
                    generation=int(r[5]),
                    lease=None if r[6] is None else Lease(r[6], int(r[7])),
                    inflight_batch_id=r[8],
                    sink=r[9],
                    branch=r[10],
                )
                for r in rows
            )

        return self._read(work)
