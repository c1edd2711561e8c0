"""What the SQL checkpoint store needs of a database: a `Backend` and the `Tx` it opens.

The two backends (sqlite_store, postgres_store) differ only in connecting, starting
transactions, locking a row and reading the clock; all of the store's SQL runs unchanged on
both, written with `?` placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


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
