"""SQLite backend: the embedded default, one file on local disk.

WAL journal with synchronous=FULL so a committed chunk survives power loss; write transactions
start with BEGIN IMMEDIATE so two processes serialize at the start instead of failing at COMMIT;
a busy timeout turns short waits for another writer into a delay rather than an error.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from icetail.kernel.errors import (
    ConfigError,
    IcetailError,
    StateError,
    StateUnavailableError,
    error_text,
    is_disk_full,
)
from icetail.state.migrations import META_TABLE, no_icetail_state
from icetail.state.urls import SqliteLocation, check_sqlite_folder

if TYPE_CHECKING:
    from icetail.state.backend import Tx

DEFAULT_BUSY_TIMEOUT_MS = 10_000

# julianday('now') has millisecond resolution; 2440587.5 is the Julian day of the Unix epoch.
_NOW_MS_SQL = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"


class SqliteTx:
    """Statements of one open SQLite transaction, with errors mapped to icetail's."""

    def __init__(self, conn: sqlite3.Connection, backend: SqliteBackend) -> None:
        self._conn = conn
        self._backend = backend

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._backend.translate(exc) from exc

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        try:
            return self._conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise self._backend.translate(exc) from exc

    def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        try:
            self._conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._backend.translate(exc) from exc


class SqliteBackend:
    """One connection to a SQLite file; `trace`, if given, sees each statement before it runs."""

    for_update = ""  # BEGIN IMMEDIATE already holds the database's single write lock
    now_ms_sql = _NOW_MS_SQL

    def __init__(
        self,
        location: SqliteLocation,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        trace: Callable[[str], None] | None = None,
        create: bool = True,
    ) -> None:
        """`create=False`: open only an existing file that holds icetail's tables, and change
        nothing (not even the journal mode) in a database that does not."""
        self._display = location.display
        self._busy_timeout_ms = busy_timeout_ms
        if create:
            check_sqlite_folder(location)  # never created: a mistyped path is refused, not made
        elif not location.path.is_file():
            raise ConfigError(f"no checkpoint store at {location.path}; check --state (sqlite:////absolute/path.db)")
        try:
            self._conn = sqlite3.connect(
                str(location.path) if create else f"file:{quote(str(location.path.resolve()))}?mode=rw",
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # the store serializes calls with its own lock
                uri=not create,
            )
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        try:
            if not create and not self._has_table(META_TABLE):
                raise ConfigError(no_icetail_state(self._display))
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            mode = self._journal_mode_wal()
            if str(mode).lower() != "wal":
                raise StateError(f"checkpoint store {self._display} cannot use WAL journaling (got {mode})")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            self._conn.close()
            raise self.translate(exc) from exc
        except BaseException:
            self._conn.close()
            raise
        if trace is not None:
            self._conn.set_trace_callback(trace)

    def _journal_mode_wal(self) -> str:
        """Switch to WAL, waiting out other first openers: SQLite skips the busy handler here."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        pause = 0.005
        while True:
            try:
                return str(self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if not ("locked" in text or "busy" in text) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @property
    def display(self) -> str:
        return self._display

    def _has_table(self, name: str) -> bool:
        rows = self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return rows.fetchone() is not None

    def holds_table(self, tx: Tx, name: str) -> bool:
        return bool(tx.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def transaction(self, *, write: bool) -> AbstractContextManager[SqliteTx]:
        return self._transaction("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")

    def migration_transaction(self) -> AbstractContextManager[SqliteTx]:
        return self._transaction("BEGIN IMMEDIATE")

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[SqliteTx]:
        self._control(begin)
        try:
            yield SqliteTx(self._conn, self)
            self._control("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the original error matters more; SQLite rolls back on close anyway
            raise

    def _control(self, statement: str) -> None:
        try:
            self._conn.execute(statement)
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc

    def translate(self, exc: sqlite3.Error) -> IcetailError:
        """Locked/busy is transient (another process is writing); anything else is terminal."""
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return StateUnavailableError(
                f"checkpoint store {self._display} stayed locked by another process for "
                f"{self._busy_timeout_ms / 1000:g} s ({text}); retry later"
            )
        if is_disk_full(exc):  # transient: the run stops, and resumes once there is space again
            return StateUnavailableError(f"checkpoint store {self._display} failed: {error_text(exc)}")
        return StateError(f"checkpoint store {self._display} failed: {text}")

    def close(self) -> None:
        self._conn.close()
