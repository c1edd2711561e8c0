"""Consumers `serve` stopped, and why: records kept apart from the consumers themselves.

Not fenced by the lease: a stopped consumer holds none, and it may never have been created.
"""

from __future__ import annotations

from icetail.state.backend import Tx
from icetail.state.checkpoint import StoppedConsumer
from icetail.state.sql_core import SqlStoreCore
from icetail.state.sql_rows import STOPPED_SELECT, stopped_consumer

STOP_REASON_CHARS = 1000  # a stopped consumer's reason: its first line, at most this long


class SqlStoppedRecords(SqlStoreCore):
    """record_stopped, clear_stopped and stopped_consumers."""

    def record_stopped(self, consumer: str, catalog: str, table: str, reason: str) -> StoppedConsumer:
        if not consumer:
            raise ValueError("consumer id must not be empty")
        lines = reason.strip().splitlines()
        line = (lines[0] if lines else "no reason given")[:STOP_REASON_CHARS]
        now = self._backend.now_ms_sql

        def work(tx: Tx) -> StoppedConsumer:
            now_ms = int(tx.query(f"SELECT {now}")[0][0])  # read once: the clock may move between two reads
            tx.execute(
                "INSERT INTO icetail_stopped_consumers (consumer, catalog_name, table_name, reason, stopped_at_ms, "
                "updated_at_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (consumer) DO UPDATE SET "
                "catalog_name = excluded.catalog_name, table_name = excluded.table_name, reason = excluded.reason, "
                "updated_at_ms = excluded.updated_at_ms",
                (consumer, catalog, table, line, now_ms, now_ms),
            )
            return stopped_consumer(tx.query(f"{STOPPED_SELECT} WHERE consumer = ?", (consumer,))[0])

        return self._write(work)

    def clear_stopped(self, consumer: str) -> bool:
        return self._write(
            lambda tx: tx.execute("DELETE FROM icetail_stopped_consumers WHERE consumer = ?", (consumer,)) > 0
        )

    def stopped_consumers(self) -> tuple[StoppedConsumer, ...]:
        return self._read(
            lambda tx: tuple(stopped_consumer(r) for r in tx.query(f"{STOPPED_SELECT} ORDER BY consumer"))
        )
