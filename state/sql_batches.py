"""Writes that move a consumer's progress: a batch from begin to finish or abandon, and the cursor.

Rules 1 to 3 of state/contract.py are kept here, each inside one write transaction: a batch is
written ahead only if the cursor is where it was planned from (CAS); chunk commits never move a
split backwards and an exact replay is a no-op; `finish_batch` advances the cursor, clears the
batch and appends to the history at once. Every write is fenced by the lease (rule 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from icetail.kernel.errors import StateConflictError
from icetail.state.backend import Tx
from icetail.state.checkpoint import ChunkCommit, Cursor, HistoryEntry, InflightBatch
from icetail.state.codec import encode_split
from icetail.state.sql_core import SqlStoreCore
from icetail.state.sql_rows import (
    BATCH_COLUMNS,
    HISTORY_COLUMNS,
    BatchHeader,
    column_count,
    history_entry,
    placeholders,
    shape_values,
)


class SqlBatchWrites(SqlStoreCore):
    """begin_batch, commit_chunks (commit_chunk: the contract's), finish_batch, abandon_batch and reset_cursor."""

    def begin_batch(self, consumer: str, batch: InflightBatch, *, owner: str | None = None) -> None:
        encoded = [encode_split(s) for s in batch.splits]  # outside the transaction: it can be slow

        def work(tx: Tx) -> None:
            row = self._fenced_row(tx, consumer, owner)
            header = self._batch_header(tx, consumer)
            if header is not None:
                if self._same_batch(tx, consumer, header, batch):
                    return
                raise StateConflictError(
                    f"consumer {consumer!r} already has batch {header.batch_id} in flight "
                    f"(snapshots {header.from_snapshot_exclusive} exclusive to "
                    f"{header.to_snapshot_inclusive} inclusive); "
                    f"finish or abandon it before beginning batch {batch.batch_id}"
                )
            if row.cursor.snapshot_id != batch.from_snapshot_exclusive:
                raise StateConflictError(
                    f"consumer {consumer!r} cursor is at snapshot {row.cursor.snapshot_id}, but batch {batch.batch_id} "
                    f"starts after snapshot {batch.from_snapshot_exclusive}; reload and replan"
                )
            tx.execute(
                f"INSERT INTO icetail_inflight_batches (consumer, {BATCH_COLUMNS}) "
                f"VALUES ({placeholders(1 + column_count(BATCH_COLUMNS))})",
                (
                    consumer,
                    batch.batch_id,
                    batch.from_snapshot_exclusive,
                    batch.to_snapshot_inclusive,
                    batch.to_timestamp_ms,
                    len(batch.splits),
                    row.now_ms,
                    *shape_values(batch.shape),
                ),
            )
            tx.execute_many(
                "INSERT INTO icetail_inflight_splits (consumer, batch_id, ordinal, split_id, split_json, "
                "next_row_exclusive, rows_emitted, done, sink_token, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?, NULL, 0, ?, NULL, ?)",
                [
                    (consumer, batch.batch_id, i, s.split_id, text, False, row.now_ms)
                    for i, (s, text) in enumerate(zip(batch.splits, encoded, strict=True))
                ],
            )

        self._write(work)

    def _same_batch(self, tx: Tx, consumer: str, header: BatchHeader, batch: InflightBatch) -> bool:
        if header.split_count != len(batch.splits) or header.batch() != replace(batch, splits=()):
            return False
        rows = tx.query(
            "SELECT split_id FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ? ORDER BY ordinal",
            (consumer, header.batch_id),
        )
        return tuple(r[0] for r in rows) == batch.split_ids

    def commit_chunks(
        self, consumer: str, batch_id: str, commits: Sequence[ChunkCommit], *, owner: str | None = None
    ) -> None:
        ids = [c.split_id for c in commits]
        if len(set(ids)) != len(ids):
            raise ValueError(f"commit_chunks names a split more than once: {ids}")

        def work(tx: Tx) -> None:
            row = self._fenced_row(tx, consumer, owner)
            for commit in commits:
                self._apply_chunk(tx, consumer, batch_id, commit, row.now_ms)

        self._write(work)

    def _apply_chunk(self, tx: Tx, consumer: str, batch_id: str, commit: ChunkCommit, now_ms: int) -> None:
        found = tx.query(  # a split row exists only while its batch is in flight
            "SELECT next_row_exclusive, done, sink_token, parts_done, parts_key FROM icetail_inflight_splits "
            "WHERE consumer = ? AND batch_id = ? AND split_id = ?",
            (consumer, batch_id, commit.split_id),
        )
        if not found:
            self._require_inflight(tx, consumer, batch_id)
            raise StateConflictError(f"batch {batch_id} of consumer {consumer!r} has no split {commit.split_id}")
        stored_next, stored_done, stored_token, stored_parts, stored_key = found[0]
        stored_done = bool(stored_done)
        parts = stored_parts if commit.parts_done is None else commit.parts_done
        key = stored_key if commit.parts_key is None else commit.parts_key
        where = f"split {commit.split_id} of batch {batch_id} (consumer {consumer!r})"
        if stored_key is not None and key != stored_key:
            raise StateConflictError(f"{where}: its snapshot is cut into partitions as {stored_key}, not {key}")
        if (stored_next, stored_done, stored_token, stored_parts) == (
            commit.next_row_exclusive,
            commit.done,
            commit.sink_token,
            parts,
        ):
            return  # replay of the commit already stored
        if stored_done:
            raise StateConflictError(f"{where} is already done at row {stored_next}; it cannot change")
        if commit.parts_done is not None and stored_parts is not None and parts <= stored_parts and not commit.done:
            raise StateConflictError(
                f"{where} has {stored_parts} partitions delivered; refusing to move it to {parts} "
                "(partitions are delivered once, in order)"
            )
        more_parts = parts is not None and (stored_parts is None or parts > stored_parts)
        if stored_next is not None and (
            commit.next_row_exclusive < stored_next
            or (commit.next_row_exclusive == stored_next and not commit.done and not more_parts)
        ):
            raise StateConflictError(
                f"{where} is committed up to row {stored_next} exclusive; refusing to move it to "
                f"{commit.next_row_exclusive} (offsets only move forward)"
            )
        tx.execute(
            "UPDATE icetail_inflight_splits SET next_row_exclusive = ?, rows_emitted = rows_emitted + ?, "
            "done = ?, sink_token = ?, parts_done = ?, parts_key = ?, updated_at_ms = ? "
            "WHERE consumer = ? AND batch_id = ? AND split_id = ?",
            (
                commit.next_row_exclusive,
                commit.rows_in_chunk,
                commit.done,
                commit.sink_token,
                parts,
                key,
                now_ms,
                consumer,
                batch_id,
                commit.split_id,
            ),
        )

    def finish_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> HistoryEntry:
        def work(tx: Tx) -> HistoryEntry:
            row = self._fenced_row(tx, consumer, owner)
            header = self._batch_header(tx, consumer)
            if header is None:
                last = tx.query(
                    f"SELECT {HISTORY_COLUMNS} FROM icetail_history WHERE consumer = ? ORDER BY seq DESC LIMIT 1",
                    (consumer,),
                )
                if last and last[0][0] == batch_id:
                    return history_entry(last[0])  # replay of the finish already stored
                raise StateConflictError(f"consumer {consumer!r} has no batch in flight; cannot finish {batch_id}")
            if header.batch_id != batch_id:
                raise StateConflictError(
                    f"consumer {consumer!r} has batch {header.batch_id} in flight, not {batch_id}; reload and resume"
                )
            if row.cursor.snapshot_id != header.from_snapshot_exclusive:  # reset_cursor refuses this; defensive
                raise StateConflictError(
                    f"consumer {consumer!r} cursor moved to {row.cursor.snapshot_id} under batch {batch_id}"
                )
            not_done, rows = tx.query(
                "SELECT COALESCE(SUM(CASE WHEN done THEN 0 ELSE 1 END), 0), "
                "CAST(COALESCE(SUM(rows_emitted), 0) AS BIGINT) "
                "FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ?",
                (consumer, batch_id),
            )[0]
            if int(not_done):
                raise StateConflictError(
                    f"batch {batch_id} of consumer {consumer!r} has {int(not_done)} of {header.split_count} splits "
                    "not done; commit them before finishing the batch"
                )
            entry = HistoryEntry(
                batch_id=batch_id,
                from_snapshot_exclusive=header.from_snapshot_exclusive,
                to_snapshot_inclusive=header.to_snapshot_inclusive,
                rows=int(rows),
                split_count=header.split_count,
                started_at_ms=header.created_at_ms,
                finished_at_ms=row.now_ms,
                shape=header.shape,
            )
            generation = row.generation + 1
            tx.execute(
                "UPDATE icetail_consumers SET cursor_snapshot_id = ?, cursor_timestamp_ms = ?, generation = ?, "
                "updated_at_ms = ? WHERE consumer = ?",
                (header.to_snapshot_inclusive, header.to_timestamp_ms, generation, row.now_ms, consumer),
            )
            tx.execute(
                f"INSERT INTO icetail_history (consumer, seq, {HISTORY_COLUMNS}) "
                f"VALUES ({placeholders(2 + column_count(HISTORY_COLUMNS))})",
                (
                    consumer,
                    generation,
                    entry.batch_id,
                    entry.from_snapshot_exclusive,
                    entry.to_snapshot_inclusive,
                    entry.rows,
                    entry.split_count,
                    entry.started_at_ms,
                    entry.finished_at_ms,
                    *shape_values(entry.shape),
                ),
            )
            self._delete_batch(tx, consumer, batch_id)
            tx.execute(
                "DELETE FROM icetail_history WHERE consumer = ? AND seq < "
                "(SELECT seq FROM icetail_history WHERE consumer = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (consumer, consumer, self._history_limit - 1),
            )
            return entry

        return self._write(work)

    def abandon_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> None:
        def work(tx: Tx) -> None:
            self._fenced_row(tx, consumer, owner)
            header = self._batch_header(tx, consumer)
            if header is None:
                return  # nothing in flight: already abandoned or finished
            if header.batch_id != batch_id:
                raise StateConflictError(f"consumer {consumer!r} has batch {header.batch_id} in flight, not {batch_id}")
            self._delete_batch(tx, consumer, batch_id)

        self._write(work)

    def reset_cursor(self, consumer: str, cursor: Cursor, *, owner: str | None = None) -> None:
        def work(tx: Tx) -> None:
            row = self._require_idle(
                tx,
                consumer,
                owner,
                lambda _, batch_id: (
                    f"consumer {consumer!r} has batch {batch_id} in flight; abandon it before resetting the cursor"
                ),
            )
            tx.execute(
                "UPDATE icetail_consumers SET cursor_snapshot_id = ?, cursor_timestamp_ms = ?, "
                "generation = generation + 1, updated_at_ms = ? WHERE consumer = ?",
                (cursor.snapshot_id, cursor.timestamp_ms, row.now_ms, consumer),
            )

        self._write(work)
