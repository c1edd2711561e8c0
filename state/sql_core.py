"""The core of the SQL checkpoint store: lifecycle, migration, transactions and the row helpers.

Every call of the store runs in one transaction of its own (`_read` or `_write`), serialized
with the object's other calls; a write first reads the consumer's row locked (`_require`), so
that its checks (fencing, the batch in flight) and its change see the same state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from icetail.kernel.errors import ConfigError, ConsumerNotFoundError, StateConflictError, StateError
from icetail.kernel.settings import HISTORY_LIMIT
from icetail.state.backend import Backend, Tx
from icetail.state.checkpoint import Cursor, Lease
from icetail.state.fencing import check_writer
from icetail.state.migrations import (
    META_DDL,
    META_TABLE,
    SCHEMA_VERSION_KEY,
    no_icetail_state,
    parse_version,
    pending_migrations,
)
from icetail.state.sql_rows import BATCH_COLUMNS, CONSUMER_COLUMNS, BatchHeader, ConsumerRow, batch_shape

T = TypeVar("T")
S = TypeVar("S", bound="SqlStoreCore")


class SqlStoreCore:
    """What every part of SqlCheckpointStore stands on: the backend, the lock that serializes
    calls, migrating on open, one read or write transaction per call, and reading the consumer
    and batch rows a write checks before it changes them."""

    def __init__(self, backend: Backend, *, history_limit: int = HISTORY_LIMIT, create: bool = True) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        self._backend = backend
        self._create = create
        self._history_limit = history_limit
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._migrate()
        except BaseException:
            backend.close()
            raise

    @property
    def display(self) -> str:
        return self._backend.display

    @property
    def backend(self) -> Backend:
        """The database, for modules that keep tables of their own in the store (state/replicas.py)."""
        return self._backend

    def transact(self, work: Callable[[Tx], T], *, write: bool) -> T:
        """Run `work` in one transaction of this store, serialized with its other calls."""
        return self._write(work) if write else self._read(work)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._backend.close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _migrate(self) -> None:
        where = self._backend.display
        with self._backend.migration_transaction() as tx:
            if not self._create and not self._backend.holds_table(tx, META_TABLE):
                raise ConfigError(no_icetail_state(where))
            tx.execute(META_DDL)
            rows = tx.query(f"SELECT value FROM {META_TABLE} WHERE key = ?", (SCHEMA_VERSION_KEY,))
            current = parse_version(rows[0][0] if rows else None, where)
            pending = pending_migrations(current, where)
            for migration in pending:
                for statement in migration.statements:
                    tx.execute(statement)
                if migration.backfill is not None:
                    migration.backfill(tx)
            if pending:
                tx.execute(
                    f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (SCHEMA_VERSION_KEY, str(pending[-1].version)),
                )

    def _read(self, work: Callable[[Tx], T]) -> T:
        with self._lock:
            self._check_open()
            with self._backend.transaction(write=False) as tx:
                return work(tx)

    def _write(self, work: Callable[[Tx], T]) -> T:
        with self._lock:
            self._check_open()
            with self._backend.transaction(write=True) as tx:
                return work(tx)

    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"checkpoint store {self._backend.display} is closed")

    # -- row helpers -----------------------------------------------------------------------

    def _require_idle(
        self, tx: Tx, consumer: str, owner: str | None, refusal: Callable[[ConsumerRow, str], str]
    ) -> ConsumerRow:
        """The consumer's row, locked, for a change that must wait for no batch in flight;
        `refusal(row, batch_id)` says why not when one is."""
        row = self._fenced_row(tx, consumer, owner)
        header = self._batch_header(tx, consumer)
        if header is not None:
            raise StateConflictError(refusal(row, header.batch_id))
        return row

    def _fenced_row(self, tx: Tx, consumer: str, owner: str | None) -> ConsumerRow:
        """The consumer's row, locked, once the lease lets `owner` write it (rule 4, state/fencing.py)."""
        row = self._require(tx, consumer, lock=True)
        check_writer(consumer, owner, row)
        return row

    def _consumer_row(self, tx: Tx, consumer: str, *, lock: bool) -> ConsumerRow | None:
        suffix = self._backend.for_update if lock else ""
        rows = tx.query(
            f"SELECT {CONSUMER_COLUMNS}, {self._backend.now_ms_sql} FROM icetail_consumers WHERE consumer = ?{suffix}",
            (consumer,),
        )
        if not rows:
            return None
        cat, tbl, snap, ts, gen, lease_owner, lease_exp, sink, branch, now = rows[0]
        return ConsumerRow(
            catalog=cat,
            table=tbl,
            cursor=Cursor(snap, ts),
            generation=int(gen),
            lease=None if lease_owner is None else Lease(lease_owner, int(lease_exp)),
            now_ms=int(now),
            sink=sink,
            branch=branch,
        )

    def _require(self, tx: Tx, consumer: str, *, lock: bool) -> ConsumerRow:
        row = self._consumer_row(tx, consumer, lock=lock)
        if row is None:
            raise ConsumerNotFoundError(
                f"checkpoint store {self._backend.display} has no consumer {consumer!r}; ensure_consumer creates it"
            )
        return row

    def _batch_header(self, tx: Tx, consumer: str) -> BatchHeader | None:
        rows = tx.query(f"SELECT {BATCH_COLUMNS} FROM icetail_inflight_batches WHERE consumer = ?", (consumer,))
        if not rows:
            return None
        bid, frm, to, to_ts, count, created, *shape = rows[0]
        return BatchHeader(bid, frm, to, int(to_ts), int(count), int(created), batch_shape(shape))

    def _require_inflight(self, tx: Tx, consumer: str, batch_id: str) -> BatchHeader:
        header = self._batch_header(tx, consumer)
        if header is None or header.batch_id != batch_id:
            actual = "no batch" if header is None else f"batch {header.batch_id}"
            raise StateConflictError(f"consumer {consumer!r} has {actual} in flight, not {batch_id}")
        return header

    def _delete_batch(self, tx: Tx, consumer: str, batch_id: str) -> None:
        tx.execute("DELETE FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ?", (consumer, batch_id))
        tx.execute("DELETE FROM icetail_inflight_batches WHERE consumer = ? AND batch_id = ?", (consumer, batch_id))
