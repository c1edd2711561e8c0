"""Writes to a consumer's record: creating it, its sink and branch, forgetting an unstarted one.

Each is one write transaction over the consumer's locked row, fenced by the lease
(state/fencing.py); the operator's changes (sink, branch) are refused while a batch is in flight.
"""

from __future__ import annotations

from collections.abc import Callable

from icetail.kernel.errors import ConfigError, ConsumerNotFoundError
from icetail.state.backend import Tx
from icetail.state.checkpoint import Checkpoint, NewConsumer
from icetail.state.fencing import check_live_holder, check_writer
from icetail.state.sql_reads import SqlReads
from icetail.state.sql_rows import ConsumerRow


class SqlConsumerWrites(SqlReads):
    """create_or_load (ensure_consumer), record_sink, forget_unstarted, change_sink and change_branch.

    On SqlReads: create_or_load answers with the checkpoint it leaves (`load`).
    """

    def create_or_load(self, consumer: str, new: NewConsumer) -> Checkpoint:
        if not consumer:
            raise ValueError("consumer id must not be empty")
        now = self._backend.now_ms_sql

        def work(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO icetail_consumers (consumer, catalog_name, table_name, cursor_snapshot_id, "
                "cursor_timestamp_ms, generation, lease_owner, lease_expires_at_ms, created_at_ms, updated_at_ms, "
                f"sink_url, branch) VALUES (?, ?, ?, ?, ?, 0, NULL, NULL, {now}, {now}, ?, ?) "
                "ON CONFLICT (consumer) DO NOTHING",
                (
                    consumer,
                    new.catalog,
                    new.table,
                    new.initial_cursor.snapshot_id,
                    new.initial_cursor.timestamp_ms,
                    new.sink,
                    new.branch,
                ),
            )
            row = self._require(tx, consumer, lock=False)
            if (row.catalog, row.table) != (new.catalog, new.table):
                raise ConfigError(
                    f"consumer {consumer!r} follows {row.catalog}.{row.table} in checkpoint store "
                    f"{self._backend.display}, not {new.catalog}.{new.table}; use another consumer id"
                )

        self._write(work)
        checkpoint = self.load(consumer)
        if checkpoint is None:  # pragma: no cover - consumers are never deleted
            raise ConsumerNotFoundError(f"consumer {consumer!r} vanished from {self._backend.display}")
        return checkpoint

    def record_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> str:
        if not sink:
            raise ValueError("sink must not be empty")

        def work(tx: Tx) -> str:
            row = self._require(tx, consumer, lock=True)
            if row.sink is not None:
                return row.sink
            check_writer(consumer, owner, row)
            tx.execute("UPDATE icetail_consumers SET sink_url = ? WHERE consumer = ?", (sink, consumer))
            return sink

        return self._write(work)

    def forget_unstarted(self, consumer: str, *, owner: str) -> bool:
        def work(tx: Tx) -> bool:
            row = self._consumer_row(tx, consumer, lock=True)
            if row is None:
                return False
            check_live_holder(consumer, owner, row)
            if row.generation != 0 or self._batch_header(tx, consumer) is not None:
                return False
            if tx.query("SELECT 1 FROM icetail_history WHERE consumer = ?", (consumer,)):
                return False
            return tx.execute("DELETE FROM icetail_consumers WHERE consumer = ? AND generation = 0", (consumer,)) == 1

        return self._write(work)

    def change_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> None:
        self._change_idle_consumer(
            consumer,
            "sink_url",
            sink,
            owner,
            lambda row, batch_id: (
                f"consumer {consumer!r} has batch {batch_id} in flight, part of it delivered to "
                f"{row.sink}; let a run finish it, or also give --to to abandon it, before changing the sink"
            ),
        )

    def change_branch(self, consumer: str, branch: str, *, owner: str | None = None) -> None:
        self._change_idle_consumer(
            consumer,
            "branch",
            branch,
            owner,
            lambda row, batch_id: (
                f"consumer {consumer!r} has batch {batch_id} in flight on branch {row.branch!r}; let a run "
                "finish it, or also give --to to abandon it, before changing the branch"
            ),
        )

    def _change_idle_consumer(
        self,
        consumer: str,
        column: str,
        value: str,
        owner: str | None,
        refusal: Callable[[ConsumerRow, str], str],
    ) -> None:
        """Set one of the consumer's recorded choices (sink_url, branch): an operator action, fenced
        by the lease and refused while a batch is in flight (`refusal` says why)."""
        if not value:
            raise ValueError(f"{column} must not be empty")

        def work(tx: Tx) -> None:
            row = self._require_idle(tx, consumer, owner, refusal)
            tx.execute(
                f"UPDATE icetail_consumers SET {column} = ?, updated_at_ms = ? WHERE consumer = ?",
                (value, row.now_ms, consumer),
            )

        self._write(work)
