"""The PostgreSQL mirror as a pipeline sink: chunks applied by key, a group of them per transaction.

The rows come to the driver (the sink is not a staging sink: a database takes rows over its
connection, not files). The pipeline holds the chunks it reads in a group (`GroupWriteSink`,
bounded by --sink-commit-rows/--sink-commit-interval) and commits their offsets only after
`write_group` committed; a reconciled snapshot or a --net batch comes alone through `write`.
The chunks' ledger rows commit with their rows, so chunks replayed after a crash (applied,
offsets not committed) are left out by the target itself, however the replay is grouped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, SinkSetupError, message_line
from icetail.kernel.pg_session import client_bounds, server_bounds_sql
from icetail.kernel.pg_setup import SETUP_FIX, is_setup_problem
from icetail.kernel.secrets import redact_text
from icetail.sinks.base import ChunkKey
from icetail.sinks.keyed.history_versions import history_key, version_changes
from icetail.sinks.keyed.merge import local_merge
from icetail.sinks.postgres.apply import Applied, apply_group, apply_mirror, ensure_ledger
from icetail.sinks.postgres.apply_history import apply_history
from icetail.sinks.postgres.history import HISTORY_COLUMNS
from icetail.sinks.postgres.schema import Existing, changes, qualified, read_existing, schema_exists
from icetail.sinks.postgres.sessions import pool_for
from icetail.sinks.postgres.types import Column, data_columns, field_id
from icetail.sinks.postgres.url import MirrorTarget, parse_mirror_url

log = logging.getLogger("icetail.sinks.postgres")
CONNECT_TIMEOUT_S = 10
# a group's transaction merges and encodes rows between its statements (seconds for a big group); idle
# a minute inside one, its client is gone: the server ends it and frees the target's rows (pg_session.py)
IDLE_IN_TRANSACTION_MS = 60_000


class PostgresMirrorSink:
    """Keeps SCHEMA.TABLE equal to the followed table by key (mode=mirror), or holding every version
    of every key (mode=history); see docs/sinks.md."""

    exactly_once = True

    def __init__(self, target: MirrorTarget | str, *, consumer: str) -> None:
        """`target`: the sink URL as parsed (registry.py), or its text."""
        self.target: MirrorTarget = parse_mirror_url(target) if isinstance(target, str) else target
        self.history = self.target.mode == "history"
        self.consumer = consumer
        self.duplicates = 0  # inserts of a key the source already held, since open (docs/sinks.md)
        self.replayed = 0  # chunks found in the ledger (applied before a crash) and skipped, since open
        self._key_ids: tuple[int | None, ...] | None = None
        self._key: tuple[str, ...] = ()
        self._existing: Existing | None = None  # the target as last committed by this sink; None: read it
        self._fence: Callable[[str], None] = lambda what: None  # the pipeline's lease deadline (fence_commits)

    def fence_commits(self, check: Callable[[str], None]) -> None:
        """A group's transaction may run seconds after the pipeline checked the lease: checked again at COMMIT."""
        self._fence = check

    def bind(self, key: tuple[str, ...], schema: pa.Schema) -> None:
        """Check the target against the source's current schema and `key`; adopt a matching table."""
        if not key:
            raise ConfigError(f"sink {self.target.identity} needs a key: give --identifier-columns")
        columns = self._columns(schema, key)
        by_name = {c.name: c for c in columns}
        missing = [k for k in key if k not in by_name]
        if missing:
            raise ConfigError(f"mirror key column(s) {', '.join(missing)} are not columns of the source")
        self._key, self._key_ids = key, tuple(by_name[k].field_id for k in key)
        with self._session() as conn:
            self._run(lambda: ensure_ledger(conn, self.target.ledger_schema))
            existing = self._run(lambda: read_existing(conn, self.target.schema, self.target.table))
        if existing is not None:
            statements = self._changes(existing, columns, key)
            if not existing.managed and statements:  # adopt a matching table: record its field ids
                self._run(lambda: self._execute(statements))

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """One chunk in one transaction (a reconciled snapshot, a --net batch, or no grouping)."""
        return self.write_group([(key, rows)])[0]

    def write_group(self, chunks: Sequence[tuple[ChunkKey, pa.Table]]) -> list[str | None]:
        """Chunks of one batch, in delivery order, applied in one transaction (chunks applied before
        left out); returns after the commit, so the pipeline may commit their offsets."""
        if self._key_ids is None:
            raise ConfigError(f"sink {self.target.identity} was not bound to a key (Pipeline binds it at open)")
        schema = chunks[0][1].schema
        names = self._key_names(schema)
        columns = self._columns(schema, names)
        target = qualified(self.target.schema, self.target.table)

        def body(conn: Any, claimed: list[int]) -> Applied:
            tables = [chunks[i][1] for i in claimed]  # one batch: one schema (metadata aside)
            rows = pa.concat_tables([t if t.schema.equals(schema) else t.cast(schema) for t in tables])
            if self.history:
                return apply_history(conn, target, version_changes(rows, names), columns, names)
            return apply_mirror(conn, target, local_merge(rows, names), columns, names)

        name = f"{self.target.schema}.{self.target.table}"
        keys = [key for key, _ in chunks]
        try:
            with self._session() as conn:
                existing = self._existing or self._run(
                    lambda: read_existing(conn, self.target.schema, self.target.table)
                )
                missing_schema = existing is None and not self._run(lambda: schema_exists(conn, self.target.schema))
                ddl = self._changes(existing, columns, names, create_schema=missing_schema)
                applied: Applied = self._run(
                    lambda: apply_group(
                        conn,
                        ledger_schema=self.target.ledger_schema,
                        target_name=name,
                        chunks=keys,
                        ddl=ddl,
                        body=body,
                        before_commit=lambda: self._fence("mirror's commit"),
                    )
                )
        except BaseException:
            self._existing = None  # the schema may or may not have changed: read it again
            raise
        if applied.skipped < len(chunks):
            self._existing = Existing(columns, self._primary_key(names))
        self._report(keys, applied)
        return [None] * len(chunks)

    def _report(self, keys: list[ChunkKey], applied: Applied) -> None:
        first = keys[0].name if len(keys) == 1 else f"{keys[0].name}..{keys[-1].name}"
        if applied.skipped:
            self.replayed += applied.skipped
            log.info(
                "%d chunk(s) of %s already applied to %s: skipped (a replay)",
                applied.skipped,
                first,
                self.target.identity,
            )
        if applied.duplicates:
            self.duplicates += applied.duplicates
            log.warning(
                "chunk(s) %s: %d insert(s) of a key the target already held (the source holds a key twice, or the "
                "target held rows before): last writer wins; %d since start",
                first,
                applied.duplicates,
                self.duplicates,
            )

    def close(self) -> None:
        """Nothing to release: the sessions belong to the process's pool (sessions.py), shared with
        the other consumers writing to this database."""

    def _columns(self, schema: pa.Schema, key: tuple[str, ...]) -> tuple[Column, ...]:
        """The target's columns: the data columns, and a history table's validity columns."""
        return data_columns(schema, key) + (HISTORY_COLUMNS if self.history else ())

    def _primary_key(self, key: tuple[str, ...]) -> tuple[str, ...]:
        return history_key(key) if self.history else key

    def _changes(
        self, existing: Existing | None, columns: tuple[Column, ...], key: tuple[str, ...], create_schema: bool = False
    ) -> list[Any]:
        target = self.target
        return changes(
            existing,
            columns,
            self._primary_key(key),
            target.schema,
            target.table,
            keep_dropped=self.history,
            create_schema=create_schema,
        )

    def _key_names(self, schema: pa.Schema) -> tuple[str, ...]:
        """The key's columns in `schema` (by field id: a renamed key column is still the key)."""
        by_id = {field_id(f): f.name for f in schema}
        assert self._key_ids is not None
        return tuple(
            by_id.get(i, name) if i is not None else name for i, name in zip(self._key_ids, self._key, strict=True)
        )

    def _execute(self, statements: list[Any]) -> None:
        with self._session() as conn, conn.transaction():
            for statement in statements:
                conn.execute(statement)

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """A session of the process's pool for this target (sessions.py), the caller's alone until the block ends."""
        target = self.target
        with pool_for((target.conninfo, target.lock_timeout), lambda: connect(target)).session() as conn:
            yield conn

    def _run(self, step: Any) -> Any:
        """`step()` with PostgreSQL's errors as icetail's: a lost connection is transient, the rest terminal."""
        import psycopg

        try:
            return step()
        except psycopg.errors.LockNotAvailable as exc:
            raise SinkError(
                f"sink {self.target.identity}: a lock on the target was not granted within lock_timeout "
                f"{self.target.lock_timeout} ({redact_text(message_line(exc))}): another session holds it; retry, "
                "or find that session in pg_locks"
            ) from None
        except psycopg.Error as exc:
            if is_setup_problem(exc):  # a privilege revoked, a schema dropped: not healed by a retry
                raise _setup_error(self.target, exc) from None
            if isinstance(exc, psycopg.OperationalError):
                raise SinkError(
                    f"sink {self.target.identity} failed: {redact_text(message_line(exc))}; retry"
                ) from None
            raise SinkRejectedError(
                f"sink {self.target.identity} refused a change: {redact_text(message_line(exc))}"
            ) from None


def connect(target: MirrorTarget) -> Any:
    """A session on the target's database (autocommit, the sink's lock_timeout).

    A database, role or password that is wrong is a SinkSetupError (terminal), an unreachable server
    a SinkError (transient), a connection parameter libpq refuses a ConfigError.
    """
    import psycopg

    try:
        conn = psycopg.connect(
            target.conninfo,
            autocommit=True,
            **client_bounds(target.conninfo, connect_timeout=CONNECT_TIMEOUT_S, application_name=application_name()),
        )
    except psycopg.ProgrammingError as exc:  # a parameter this libpq does not know
        raise ConfigError(f"sink URL {target.identity!r} is not usable: {redact_text(message_line(exc))}") from None
    except psycopg.OperationalError as exc:
        if is_setup_problem(exc):
            raise _setup_error(target, exc) from None
        raise SinkError(
            f"cannot reach sink {target.identity}: {redact_text(message_line(exc))}; check that "
            "PostgreSQL is running and the URL's host, port, user and database are right"
        ) from None
    try:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (target.lock_timeout,))
        conn.execute(*server_bounds_sql(IDLE_IN_TRANSACTION_MS))
    except psycopg.Error as exc:
        conn.close()
        raise SinkError(f"sink {target.identity} failed: {redact_text(message_line(exc))}; retry") from None
    return conn


def application_name() -> str:
    """This process's mirror sessions' `application_name` (unless the URL sets one): `icetail-mirror:PID`."""
    return f"icetail-mirror:{os.getpid()}"


def check_reachable(target: MirrorTarget) -> None:
    """Connect to the sink's database and leave: a run checks this before it creates its checkpoint store."""
    connect(target).close()


def _setup_error(target: MirrorTarget, exc: BaseException) -> SinkSetupError:
    return SinkSetupError(f"sink {target.identity}: {redact_text(message_line(exc))}; {SETUP_FIX}")
