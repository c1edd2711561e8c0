"""PostgreSQL backend: a store several hosts can share (psycopg 3, imported only when used).

Write transactions run at READ COMMITTED and lock the consumer's row first (SELECT ... FOR
UPDATE), so writes to one consumer serialize while different consumers proceed in parallel.
Reads run as one REPEATABLE READ snapshot. Migrations serialize on an advisory lock. A dropped
connection is reopened on the next call; the failed call raises StateUnavailableError.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from icetail.kernel.errors import (
    ConfigError,
    IcetailError,
    StateError,
    StateSetupError,
    StateUnavailableError,
    message_line,
)
from icetail.kernel.pg_session import client_bounds, server_bounds_sql
from icetail.kernel.pg_setup import SETUP_FIX, is_setup_problem
from icetail.state.urls import PostgresLocation

if TYPE_CHECKING:
    import psycopg

    from icetail.state.backend import Tx

DEFAULT_CONNECT_TIMEOUT_S = 10
DEFAULT_LOCK_TIMEOUT_MS = 10_000  # a writer stuck behind a dead session fails (transiently) instead of hanging
# a store transaction is a few statements in a row: idle longer inside one, its client is gone (pg_session.py);
# the server then ends it and frees the consumer's row for the replica taking the consumer over
IDLE_IN_TRANSACTION_MS = 5_000
_MIGRATION_LOCK_KEY = 0x1CE7A11  # first half of the advisory lock key; the second is the schema


def application_name() -> str:
    """This process's store sessions' `application_name`: `icetail-state:PID`."""
    return f"icetail-state:{os.getpid()}"


@functools.lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    """The shared `?`-placeholder SQL in psycopg's `%s` style."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresTx:
    """Statements of one open PostgreSQL transaction, with errors mapped to icetail's."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]], backend: PostgresBackend) -> None:
        self._conn = conn
        self._backend = backend

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            return self._conn.execute(_pg_sql(sql), params).fetchall()
        except psycopg.Error as exc:
            raise self._backend.translate(exc) from exc

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        import psycopg

        try:
            return self._conn.execute(_pg_sql(sql), params).rowcount
        except psycopg.Error as exc:
            raise self._backend.translate(exc) from exc

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """One statement per row, not psycopg's `executemany`: that runs in libpq's pipeline mode and
        ends with a Flush after its Sync, which the server reads after it armed the session's
        idle_in_transaction_session_timeout, and so disarms it. A client cut off right after it (a
        replica whose link dropped after beginning a batch) then kept its transaction, and the
        consumer's row lock, until the link healed: the replica taking the consumer over waited on
        it, cycle after cycle (issue 47). A plain statement ends with its Sync and leaves the
        timeout armed; psycopg prepares a statement repeated this often, so a row costs a round trip."""
        import psycopg

        statement = _pg_sql(sql)
        try:
            for row in rows:
                self._conn.execute(statement, row)
        except psycopg.Error as exc:
            raise self._backend.translate(exc) from exc


class PostgresBackend:
    """One psycopg connection (autocommit; transactions are explicit BEGIN/COMMIT)."""

    for_update = " FOR UPDATE"
    now_ms_sql = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"

    def __init__(
        self, location: PostgresLocation, *, lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS, create: bool = True
    ) -> None:
        """`create=False`: never create the schema (the store refuses a schema without icetail's tables)."""
        self._location = location
        self._create = create
        self._lock_timeout_ms = lock_timeout_ms
        self._conn = self._connect()

    @property
    def display(self) -> str:
        return self._location.display

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            import psycopg
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"checkpoint store {self.display} needs psycopg, which is not installed; "
                "pip install 'icetail[postgres]'"
            ) from exc

        # every store session of one process under one name in pg_stat_activity (a serve replica's pid);
        # a call cut off fails within half a minute, the lease deadline keeps the sink safe meanwhile
        extra = client_bounds(
            self._location.conninfo, application_name=application_name(), connect_timeout=DEFAULT_CONNECT_TIMEOUT_S
        )
        try:
            conn = psycopg.connect(self._location.conninfo, autocommit=True, **extra)
        except psycopg.OperationalError as exc:
            if is_setup_problem(exc):  # no such database or role, a failed authentication: terminal
                raise self._setup_error(exc) from exc
            raise StateUnavailableError(
                f"cannot reach checkpoint store {self.display}: {message_line(exc)}; "
                "check that PostgreSQL is running and the URL's host, port, user and database are right"
            ) from exc
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"bad checkpoint store URL {self.display!r}: {message_line(exc)}") from exc
        try:
            if self._location.schema is not None:
                # The name matched a lower-case identifier pattern in urls.py, so quoting it is safe.
                conn.execute(f'SET search_path TO "{self._location.schema}"')
            conn.execute(f"SET lock_timeout = {int(self._lock_timeout_ms)}")
            conn.execute(*server_bounds_sql(IDLE_IN_TRANSACTION_MS))
        except psycopg.Error as exc:
            conn.close()
            raise self.translate(exc) from exc
        return conn

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn.closed or self._conn.broken:
            self._conn.close()
            self._conn = self._connect()
        return self._conn

    def transaction(self, *, write: bool) -> AbstractContextManager[PostgresTx]:
        begin = "BEGIN ISOLATION LEVEL READ COMMITTED" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        return self._transaction(begin, migration=False)

    def migration_transaction(self) -> AbstractContextManager[PostgresTx]:
        return self._transaction("BEGIN ISOLATION LEVEL READ COMMITTED", migration=True)

    @contextmanager
    def _transaction(self, begin: str, *, migration: bool) -> Iterator[PostgresTx]:
        import psycopg

        conn = self._connection()
        tx = PostgresTx(conn, self)
        tx.execute(begin)
        try:
            if migration:
                tx.query(
                    f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_KEY}, hashtext(CAST(? AS TEXT)))",
                    (self._location.schema or "",),
                )
                if self._location.schema is not None and self._create:
                    tx.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._location.schema}"')
            yield tx
            tx.execute("COMMIT")
        except BaseException:
            if not conn.closed and not conn.broken:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass  # the original error matters more; the server rolls back a dead session
            raise

    def holds_table(self, tx: Tx, name: str) -> bool:
        """Looked up on the search_path, which is the URL's schema when it names one."""
        return tx.query("SELECT to_regclass(?) IS NOT NULL", (name,))[0][0] is True

    def translate(self, exc: Exception) -> IcetailError:
        """Connection loss, timeouts, serialization and lock failures are transient; a missing privilege or
        schema is a StateSetupError."""
        import psycopg

        if is_setup_problem(exc):
            return self._setup_error(exc)
        if isinstance(exc, psycopg.OperationalError):
            return StateUnavailableError(f"checkpoint store {self.display} is unavailable: {message_line(exc)}; retry")
        return StateError(f"checkpoint store {self.display} failed: {message_line(exc)}")

    def _setup_error(self, exc: Exception) -> StateSetupError:
        return StateSetupError(f"checkpoint store {self.display}: {message_line(exc)}; {SETUP_FIX}")

    def close(self) -> None:
        self._conn.close()
