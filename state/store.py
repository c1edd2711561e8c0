"""The checkpoint store: its contract, its one SQL implementation, and `open_store(url)`.

Exactly-once delivery rests on four rules kept here, each inside one database transaction:

1. Write-ahead: a batch (its snapshot range and its ordered splits) is stored by `begin_batch`
   before any row is read, and only if the cursor is where the caller planned from (CAS).
2. Chunk commits are monotonic: a split's `next_row_exclusive` never moves backwards, a done
   split never changes, and an identical replay of the last commit is accepted as a no-op, so
   a commit whose outcome was lost (connection dropped during COMMIT) can simply be retried.
3. `finish_batch` advances the cursor to the batch's to-snapshot only when every split is done,
   clears the batch and appends to the history, all at once.
4. Writers are fenced by the lease: a write that names an `owner` is refused unless that owner
   holds the consumer's lease; a write without an owner is refused while anyone's lease is live.

The two backends (sqlite_store, postgres_store) differ only in connecting, starting
transactions, locking a row and reading the clock; all SQL below runs unchanged on both,
written with `?` placeholders.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from icetail.kernel.errors import (
    ConfigError,
    ConsumerNotFoundError,
    StateBusyError,
    StateConflictError,
    StateError,
)
from icetail.kernel.settings import HISTORY_LIMIT
from icetail.state.checkpoint import (
    BatchShape,
    Checkpoint,
    ChunkCommit,
    ConsumerSummary,
    Cursor,
    HistoryEntry,
    Inflight,
    InflightBatch,
    Lease,
    SplitProgress,
    StoppedConsumer,
)
from icetail.state.codec import decode_split, encode_split
from icetail.state.migrations import (
    META_DDL,
    META_TABLE,
    SCHEMA_VERSION_KEY,
    no_icetail_state,
    parse_version,
    pending_migrations,
)
from icetail.state.urls import PostgresLocation, SqliteLocation, parse_store_url

STOP_REASON_CHARS = 1000  # a stopped consumer's reason: its first line, at most this long

T = TypeVar("T")


class CheckpointStore(Protocol):
    """Durable progress of many consumers (one per pipeline), each keyed by a consumer id."""

    def load(self, consumer: str) -> Checkpoint | None:
        """The consumer's whole state read consistently, or None if it was never created."""
        ...

    def ensure_consumer(
        self,
        consumer: str,
        catalog: str,
        table: str,
        initial_cursor: Cursor,
        sink: str | None = None,
        branch: str = "main",
    ) -> Checkpoint:
        """Create the consumer at `initial_cursor` (with `sink`, following `branch`) if missing; an
        existing one keeps its own.

        ConfigError if the consumer exists but follows another catalog or table.
        """
        ...

    def record_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> str:
        """Record `sink` as the consumer's sink if none is recorded yet; the sink recorded now.

        The caller compares the result with its own sink: a consumer delivers to one sink.
        """
        ...

    def forget_unstarted(self, consumer: str, *, owner: str) -> bool:
        """Remove a consumer that never began a batch (generation 0, none in flight, no history),
        held by `owner`: the first run that created it failed, and leaves no trace. False if it had begun."""
        ...

    def change_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> None:
        """Record a different sink (an operator action); refused while a batch is in flight."""
        ...

    def change_branch(self, consumer: str, branch: str, *, owner: str | None = None) -> None:
        """Follow another branch from now on (an operator action); refused while a batch is in flight."""
        ...

    def acquire_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        """Take (or extend) the lease; StateBusyError while another owner's lease is live."""
        ...

    def renew_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        """Extend a lease `owner` holds; StateBusyError if it was taken over meanwhile."""
        ...

    def release_lease(self, consumer: str, owner: str) -> None:
        """Give the lease up; a no-op if `owner` does not hold it."""
        ...

    def begin_batch(self, consumer: str, batch: InflightBatch, *, owner: str | None = None) -> None:
        """Write the batch ahead; CAS: the cursor must equal `batch.from_snapshot_exclusive`.

        StateConflictError if the cursor moved or another batch is in flight; beginning the
        same batch again (same id, range and split ids) is a no-op.
        """
        ...

    def commit_chunk(
        self,
        consumer: str,
        batch_id: str,
        split_id: str,
        next_row_exclusive: int,
        rows_in_chunk: int,
        done: bool,
        sink_token: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Record that rows at positions < next_row_exclusive of the split are delivered.

        Adds `rows_in_chunk` to the split's emitted rows and stores `sink_token`. Refuses
        (StateConflictError) a batch that is not in flight, an unknown split, an offset that
        moves backwards or stays put without finishing the split, and any change to a done
        split; an exact replay of the stored state is a no-op.
        """
        ...

    def commit_chunks(
        self, consumer: str, batch_id: str, commits: Sequence[ChunkCommit], *, owner: str | None = None
    ) -> None:
        """`commit_chunk` for several splits in one transaction: all are applied or none.

        For a chunk the sink wrote as one unit but that spans splits (e.g. a reconciled snapshot).
        """
        ...

    def finish_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> HistoryEntry:
        """Advance the cursor to the batch's to-snapshot, clear it and record it in the history.

        StateConflictError unless that batch is in flight with every split done; finishing a
        batch that is already the newest history entry returns that entry (replay).
        """
        ...

    def abandon_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> None:
        """Forget an in-flight batch and its progress, leaving the cursor where it is."""
        ...

    def reset_cursor(self, consumer: str, cursor: Cursor, *, owner: str | None = None) -> None:
        """Move the cursor (an operator action); refused while a batch is in flight."""
        ...

    def history(self, consumer: str, limit: int = HISTORY_LIMIT) -> tuple[HistoryEntry, ...]:
        """Finished batches, newest first."""
        ...

    def list_consumers(self) -> tuple[ConsumerSummary, ...]:
        """Every consumer in the store, by id."""
        ...

    def record_stopped(self, consumer: str, catalog: str, table: str, reason: str) -> StoppedConsumer:
        """Record that `serve` stopped the consumer, and why (the first line of `reason`).

        A consumer stopped already keeps when it stopped and takes the new reason. Not fenced by
        the lease: a stopped consumer holds none, and the consumer may never have been created.
        """
        ...

    def clear_stopped(self, consumer: str) -> bool:
        """Forget the consumer's stop (it delivers again); whether one was recorded."""
        ...

    def stopped_consumers(self) -> tuple[StoppedConsumer, ...]:
        """Every consumer recorded as stopped, by id."""
        ...

    def close(self) -> None:
        """Release the connection; idempotent."""
        ...

    def __enter__(self) -> CheckpointStore: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class Tx(Protocol):
    """One open transaction of a backend; SQL uses `?` placeholders."""

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]: ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...


class Backend(Protocol):
    """A connection to one database and the few dialect differences the SQL cannot hide."""

    @property
    def display(self) -> str:
        """Where the store lives, safe to print (no password)."""
        ...

    @property
    def now_ms_sql(self) -> str:
        """SQL expression of the database clock in epoch milliseconds."""
        ...

    @property
    def for_update(self) -> str:
        """Suffix of a SELECT that locks the rows it reads until the transaction ends."""
        ...

    def transaction(self, *, write: bool) -> AbstractContextManager[Tx]:
        """Commit on normal exit, roll back on an exception; a read transaction is one snapshot."""
        ...

    def migration_transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction that also excludes concurrent migrations of the same store."""
        ...

    def holds_table(self, tx: Tx, name: str) -> bool:
        """Whether the database (the schema, for PostgreSQL) has a table `name`."""
        ...

    def close(self) -> None: ...


def open_store(url: str, *, history_limit: int = HISTORY_LIMIT, create: bool = True) -> SqlCheckpointStore:
    """Open (creating and migrating as needed) the store a URL names.

    `sqlite:///relative.db`, `sqlite:////absolute.db` or `postgresql://...[?schema=name]`;
    ConfigError for anything else, StateUnavailableError if the database cannot be reached.
    With `create=False` (status, reset) nothing is created: ConfigError unless the database
    exists and already holds icetail's tables; an older icetail schema is still migrated.
    """
    location = parse_store_url(url)
    backend: Backend
    if isinstance(location, SqliteLocation):
        from icetail.state.sqlite_store import SqliteBackend

        backend = SqliteBackend(location, create=create)
    elif isinstance(location, PostgresLocation):
        from icetail.state.postgres_store import PostgresBackend

        backend = PostgresBackend(location, create=create)
    else:  # pragma: no cover - parse_store_url returns only these
        raise ConfigError(f"unsupported checkpoint store URL {url!r}")
    return SqlCheckpointStore(backend, history_limit=history_limit, create=create)


@dataclass(frozen=True)
class _ConsumerRow:
    catalog: str
    table: str
    cursor: Cursor
    generation: int
    lease: Lease | None
    now_ms: int
    sink: str | None
    branch: str


@dataclass(frozen=True)
class _BatchHeader:
    batch_id: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    to_timestamp_ms: int
    split_count: int
    created_at_ms: int
    shape: BatchShape


_CONSUMER_COLUMNS = (
    "catalog_name, table_name, cursor_snapshot_id, cursor_timestamp_ms, generation, lease_owner, lease_expires_at_ms, "
    "sink_url, branch"
)


def _column_count(columns: str) -> int:
    return len(columns.split(","))


def _placeholders(count: int) -> str:
    """`?, ?, ...` for an INSERT of `count` columns: the column lists grow with the store schema."""
    return ", ".join("?" * count)


# BatchShape, schemas 3, 5, 6, 7, 9
_SHAPE_COLUMNS = (
    "chunk_rows, first_ordinal, snapshot_count, collapsed, net, schema_id, reconcile_partition_bytes, net_partitioned"
)
_BATCH_COLUMNS = (
    "batch_id, from_snapshot_exclusive, to_snapshot_inclusive, to_timestamp_ms, split_count, created_at_ms, "
    + _SHAPE_COLUMNS
)
_HISTORY_COLUMNS = (
    "batch_id, from_snapshot_exclusive, to_snapshot_inclusive, row_count, split_count, started_at_ms, finished_at_ms, "
    + _SHAPE_COLUMNS
)


class SqlCheckpointStore:
    """CheckpointStore over a Backend; one object may be shared by threads (calls serialize)."""

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

    def __enter__(self) -> SqlCheckpointStore:
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

    # -- reads -----------------------------------------------------------------------------

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

    def _inflight(self, tx: Tx, consumer: str, header: _BatchHeader) -> Inflight:
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
        batch = InflightBatch(
            batch_id=header.batch_id,
            from_snapshot_exclusive=header.from_snapshot_exclusive,
            to_snapshot_inclusive=header.to_snapshot_inclusive,
            to_timestamp_ms=header.to_timestamp_ms,
            splits=splits,
            shape=header.shape,
        )
        return Inflight(batch=batch, created_at_ms=header.created_at_ms, progress=progress)

    def history(self, consumer: str, limit: int = HISTORY_LIMIT) -> tuple[HistoryEntry, ...]:
        if limit < 0:
            raise ValueError("limit must not be negative")

        def work(tx: Tx) -> tuple[HistoryEntry, ...]:
            self._require(tx, consumer, lock=False)
            rows = tx.query(
                f"SELECT {_HISTORY_COLUMNS} FROM icetail_history WHERE consumer = ? ORDER BY seq DESC LIMIT ?",
                (consumer, limit),
            )
            return tuple(_history_entry(r) for r in rows)

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

    # -- stopped consumers -----------------------------------------------------------------

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
            return _stopped(tx.query(f"{_STOPPED_SELECT} WHERE consumer = ?", (consumer,))[0])

        return self._write(work)

    def clear_stopped(self, consumer: str) -> bool:
        return self._write(
            lambda tx: tx.execute("DELETE FROM icetail_stopped_consumers WHERE consumer = ?", (consumer,)) > 0
        )

    def stopped_consumers(self) -> tuple[StoppedConsumer, ...]:
        return self._read(lambda tx: tuple(_stopped(r) for r in tx.query(f"{_STOPPED_SELECT} ORDER BY consumer")))

    # -- consumer and lease ----------------------------------------------------------------

    def ensure_consumer(
        self,
        consumer: str,
        catalog: str,
        table: str,
        initial_cursor: Cursor,
        sink: str | None = None,
        branch: str = "main",
    ) -> Checkpoint:
        if not consumer:
            raise ValueError("consumer id must not be empty")
        now = self._backend.now_ms_sql

        def work(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO icetail_consumers (consumer, catalog_name, table_name, cursor_snapshot_id, "
                "cursor_timestamp_ms, generation, lease_owner, lease_expires_at_ms, created_at_ms, updated_at_ms, "
                f"sink_url, branch) VALUES (?, ?, ?, ?, ?, 0, NULL, NULL, {now}, {now}, ?, ?) "
                "ON CONFLICT (consumer) DO NOTHING",
                (consumer, catalog, table, initial_cursor.snapshot_id, initial_cursor.timestamp_ms, sink, branch),
            )
            row = self._require(tx, consumer, lock=False)
            if (row.catalog, row.table) != (catalog, table):
                raise ConfigError(
                    f"consumer {consumer!r} follows {row.catalog}.{row.table} in checkpoint store "
                    f"{self._backend.display}, not {catalog}.{table}; use another consumer id"
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
            _check_writer(consumer, owner, row)
            tx.execute("UPDATE icetail_consumers SET sink_url = ? WHERE consumer = ?", (sink, consumer))
            return sink

        return self._write(work)

    def forget_unstarted(self, consumer: str, *, owner: str) -> bool:
        def work(tx: Tx) -> bool:
            row = self._consumer_row(tx, consumer, lock=True)
            if row is None:
                return False
            _check_holder(consumer, owner, row)
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
        refusal: Callable[[_ConsumerRow, str], str],
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

    def acquire_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        ttl_ms = _ttl_ms(ttl_seconds)
        if not owner:
            raise ValueError("lease owner must not be empty")

        def work(tx: Tx) -> Lease:
            row = self._require(tx, consumer, lock=True)
            held = row.lease
            if held is not None and held.owner != owner and held.is_live(row.now_ms):
                raise StateBusyError(_busy_message(consumer, held, row.now_ms))
            return self._set_lease(tx, consumer, Lease(owner, row.now_ms + ttl_ms), row.now_ms)

        return self._write(work)

    def renew_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        ttl_ms = _ttl_ms(ttl_seconds)

        def work(tx: Tx) -> Lease:
            row = self._require(tx, consumer, lock=True)
            _check_holder(consumer, owner, row)
            return self._set_lease(tx, consumer, Lease(owner, row.now_ms + ttl_ms), row.now_ms)

        return self._write(work)

    def release_lease(self, consumer: str, owner: str) -> None:
        def work(tx: Tx) -> None:
            tx.execute(
                "UPDATE icetail_consumers SET lease_owner = NULL, lease_expires_at_ms = NULL "
                "WHERE consumer = ? AND lease_owner = ?",
                (consumer, owner),
            )

        self._write(work)

    def _set_lease(self, tx: Tx, consumer: str, lease: Lease, now_ms: int) -> Lease:
        tx.execute(
            "UPDATE icetail_consumers SET lease_owner = ?, lease_expires_at_ms = ?, updated_at_ms = ? "
            "WHERE consumer = ?",
            (lease.owner, lease.expires_at_ms, now_ms, consumer),
        )
        return lease

    # -- batches ---------------------------------------------------------------------------

    def begin_batch(self, consumer: str, batch: InflightBatch, *, owner: str | None = None) -> None:
        encoded = [encode_split(s) for s in batch.splits]  # outside the transaction: it can be slow

        def work(tx: Tx) -> None:
            row = self._require(tx, consumer, lock=True)
            _check_writer(consumer, owner, row)
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
                f"INSERT INTO icetail_inflight_batches (consumer, {_BATCH_COLUMNS}) "
                f"VALUES ({_placeholders(1 + _column_count(_BATCH_COLUMNS))})",
                (
                    consumer,
                    batch.batch_id,
                    batch.from_snapshot_exclusive,
                    batch.to_snapshot_inclusive,
                    batch.to_timestamp_ms,
                    len(batch.splits),
                    row.now_ms,
                    *_shape_values(batch.shape),
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

    def _same_batch(self, tx: Tx, consumer: str, header: _BatchHeader, batch: InflightBatch) -> bool:
        if (
            header.batch_id,
            header.from_snapshot_exclusive,
            header.to_snapshot_inclusive,
            header.to_timestamp_ms,
            header.split_count,
            header.shape,
        ) != (
            batch.batch_id,
            batch.from_snapshot_exclusive,
            batch.to_snapshot_inclusive,
            batch.to_timestamp_ms,
            len(batch.splits),
            batch.shape,
        ):
            return False
        rows = tx.query(
            "SELECT split_id FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ? ORDER BY ordinal",
            (consumer, header.batch_id),
        )
        return tuple(r[0] for r in rows) == batch.split_ids

    def commit_chunk(
        self,
        consumer: str,
        batch_id: str,
        split_id: str,
        next_row_exclusive: int,
        rows_in_chunk: int,
        done: bool,
        sink_token: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        commit = ChunkCommit(split_id, next_row_exclusive, rows_in_chunk, done, sink_token)
        self.commit_chunks(consumer, batch_id, (commit,), owner=owner)

    def commit_chunks(
        self, consumer: str, batch_id: str, commits: Sequence[ChunkCommit], *, owner: str | None = None
    ) -> None:
        ids = [c.split_id for c in commits]
        if len(set(ids)) != len(ids):
            raise ValueError(f"commit_chunks names a split more than once: {ids}")

        def work(tx: Tx) -> None:
            row = self._require(tx, consumer, lock=True)
            _check_writer(consumer, owner, row)
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
            row = self._require(tx, consumer, lock=True)
            _check_writer(consumer, owner, row)
            header = self._batch_header(tx, consumer)
            if header is None:
                last = tx.query(
                    f"SELECT {_HISTORY_COLUMNS} FROM icetail_history WHERE consumer = ? ORDER BY seq DESC LIMIT 1",
                    (consumer,),
                )
                if last and last[0][0] == batch_id:
                    return _history_entry(last[0])  # replay of the finish already stored
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
                f"INSERT INTO icetail_history (consumer, seq, {_HISTORY_COLUMNS}) "
                f"VALUES ({_placeholders(2 + _column_count(_HISTORY_COLUMNS))})",
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
                    *_shape_values(entry.shape),
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
            row = self._require(tx, consumer, lock=True)
            _check_writer(consumer, owner, row)
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

    # -- row helpers -----------------------------------------------------------------------

    def _require_idle(
        self, tx: Tx, consumer: str, owner: str | None, refusal: Callable[[_ConsumerRow, str], str]
    ) -> _ConsumerRow:
        """The consumer's row, locked, for a change that must wait for no batch in flight;
        `refusal(row, batch_id)` says why not when one is."""
        row = self._require(tx, consumer, lock=True)
        _check_writer(consumer, owner, row)
        header = self._batch_header(tx, consumer)
        if header is not None:
            raise StateConflictError(refusal(row, header.batch_id))
        return row

    def _consumer_row(self, tx: Tx, consumer: str, *, lock: bool) -> _ConsumerRow | None:
        suffix = self._backend.for_update if lock else ""
        rows = tx.query(
            f"SELECT {_CONSUMER_COLUMNS}, {self._backend.now_ms_sql} FROM icetail_consumers WHERE consumer = ?{suffix}",
            (consumer,),
        )
        if not rows:
            return None
        cat, tbl, snap, ts, gen, lease_owner, lease_exp, sink, branch, now = rows[0]
        return _ConsumerRow(
            catalog=cat,
            table=tbl,
            cursor=Cursor(snap, ts),
            generation=int(gen),
            lease=None if lease_owner is None else Lease(lease_owner, int(lease_exp)),
            now_ms=int(now),
            sink=sink,
            branch=branch,
        )

    def _require(self, tx: Tx, consumer: str, *, lock: bool) -> _ConsumerRow:
        row = self._consumer_row(tx, consumer, lock=lock)
        if row is None:
            raise ConsumerNotFoundError(
                f"checkpoint store {self._backend.display} has no consumer {consumer!r}; ensure_consumer creates it"
            )
        return row

    def _batch_header(self, tx: Tx, consumer: str) -> _BatchHeader | None:
        rows = tx.query(f"SELECT {_BATCH_COLUMNS} FROM icetail_inflight_batches WHERE consumer = ?", (consumer,))
        if not rows:
            return None
        bid, frm, to, to_ts, count, created, *shape = rows[0]
        return _BatchHeader(bid, frm, to, int(to_ts), int(count), int(created), _shape(shape))

    def _require_inflight(self, tx: Tx, consumer: str, batch_id: str) -> _BatchHeader:
        header = self._batch_header(tx, consumer)
        if header is None or header.batch_id != batch_id:
            actual = "no batch" if header is None else f"batch {header.batch_id}"
            raise StateConflictError(f"consumer {consumer!r} has {actual} in flight, not {batch_id}")
        return header

    def _delete_batch(self, tx: Tx, consumer: str, batch_id: str) -> None:
        tx.execute("DELETE FROM icetail_inflight_splits WHERE consumer = ? AND batch_id = ?", (consumer, batch_id))
        tx.execute("DELETE FROM icetail_inflight_batches WHERE consumer = ? AND batch_id = ?", (consumer, batch_id))


_STOPPED_SELECT = (
    "SELECT consumer, catalog_name, table_name, reason, stopped_at_ms, updated_at_ms FROM icetail_stopped_consumers"
)


def _stopped(r: tuple[Any, ...]) -> StoppedConsumer:
    return StoppedConsumer(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]))


def _history_entry(r: tuple[Any, ...]) -> HistoryEntry:
    return HistoryEntry(
        batch_id=r[0],
        from_snapshot_exclusive=r[1],
        to_snapshot_inclusive=r[2],
        rows=int(r[3]),
        split_count=int(r[4]),
        started_at_ms=int(r[5]),
        finished_at_ms=int(r[6]),
        shape=_shape(r[7:]),  # the shape columns close the history columns
    )


def _shape(columns: Sequence[Any]) -> BatchShape:
    """BatchShape from its typed columns (SQLite returns booleans as 0/1)."""
    chunk_rows, first_ordinal, snapshot_count, collapsed, net, schema_id, partition_bytes, net_partitioned = columns
    return BatchShape(
        chunk_rows=None if chunk_rows is None else int(chunk_rows),
        first_ordinal=int(first_ordinal),
        snapshot_count=int(snapshot_count),
        collapsed=bool(collapsed),
        net=bool(net),
        schema_id=None if schema_id is None else int(schema_id),
        reconcile_partition_bytes=None if partition_bytes is None else int(partition_bytes),
        net_partitioned=bool(net_partitioned),
    )


def _shape_values(shape: BatchShape) -> tuple[int | None, int, int, bool, bool, int | None, int | None, bool]:
    return (
        shape.chunk_rows,
        shape.first_ordinal,
        shape.snapshot_count,
        shape.collapsed,
        shape.net,
        shape.schema_id,
        shape.reconcile_partition_bytes,
        shape.net_partitioned,
    )


def _ttl_ms(ttl_seconds: float) -> int:
    if not ttl_seconds > 0 or math.isinf(ttl_seconds):
        raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl_seconds}")
    return max(1, math.ceil(ttl_seconds * 1000))


def _busy_message(consumer: str, held: Lease, now_ms: int) -> str:
    left = (held.expires_at_ms - now_ms) / 1000
    return (
        f"consumer {consumer!r} is leased to {held.owner} for another {left:.1f} s; "
        "stop that run or wait for its lease to expire"
    )


def _check_holder(consumer: str, owner: str, row: _ConsumerRow) -> None:
    """`owner` must hold the lease; an expired lease nobody took over still counts as held."""
    held = row.lease
    if held is None:
        raise StateBusyError(f"consumer {consumer!r}: {owner} holds no lease (released or never acquired)")
    if held.owner != owner:
        raise StateBusyError(f"consumer {consumer!r}: {owner} lost its lease to {held.owner}")


def _check_writer(consumer: str, owner: str | None, row: _ConsumerRow) -> None:
    """Fence writes: an owner must hold the lease; no owner means nobody may hold a live one."""
    if owner is not None:
        _check_holder(consumer, owner, row)
    elif row.lease is not None and row.lease.is_live(row.now_ms):
        raise StateBusyError(_busy_message(consumer, row.lease, row.now_ms))
