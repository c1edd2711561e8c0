"""PostgreSQL mirror tests: a fresh schema per test, URLs into it, and what the target holds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest

from tests.support.stores import PG_URL, pg_unavailable


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema name no other test uses; dropped (with the target and the ledger) afterwards."""
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    name = f"icetail_mirror_{uuid.uuid4().hex[:10]}"
    yield name
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def mirror_url(schema: str, table: str = "t", extra: str = "") -> str:
    from urllib.parse import quote

    return f"{PG_URL}?table={quote(schema + '.' + table, safe='')}{extra}"


def query(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(statement, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def target_table(schema: str, table: str = "t") -> pa.Table:
    """The target's rows as Arrow (column order as in PostgreSQL), sorted by every column."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        names = [d.name for d in cur.description or ()]
        rows = cur.fetchall()
    return (
        pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
        if rows
        else pa.table({n: pa.array([], pa.null()) for n in names})
    )


def row_set(rows: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """`rows`' `columns` as sorted tuples (for comparing a target with a source)."""
    data = [rows.column(c).to_pylist() for c in columns]
    return sorted(zip(*data, strict=True), key=repr) if data else []


def ledger(schema: str) -> list[tuple[str, str]]:
    return [(c, b) for c, b in query(f'SELECT chunk, batch_id FROM "{schema}".icetail_mirror_ledger ORDER BY chunk')]
