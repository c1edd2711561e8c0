"""Fixtures for the checkpoint store tests: real SQLite files and the real PostgreSQL.

Every PostgreSQL test gets its own schema (dropped afterwards), so tests can run in parallel
and leave nothing behind. Set ICETAIL_TEST_PG_URL to point at another server; if none is
reachable the PostgreSQL cases are skipped with the reason, never faked.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from icetail.kernel.model import (
    ChangeSplit,
    ChangeTask,
    CommitInfo,
    DataFileRef,
    DeleteContent,
    DeleteFileRef,
    FileChangeKind,
)
from icetail.state.checkpoint import InflightBatch
from icetail.state.store import SqlCheckpointStore, open_store

PG_URL = os.environ.get("ICETAIL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REPO_ROOT = Path(__file__).resolve().parents[2]


def make_split(i: int, snapshot_id: int = 10, *, with_deletes: bool = False) -> ChangeSplit:
    """A realistic split of data file number i in the given snapshot."""
    deletes = (
        (
            DeleteFileRef(
                path=f"s3://bucket/t/data/del-{i}.puffin",
                file_format="puffin",
                content=DeleteContent.DELETION_VECTOR,
                record_count=3,
                file_size_in_bytes=512,
                spec_id=0,
                partition="(day=2026-01-01)",
                data_sequence_number=2,
                referenced_data_file=f"s3://bucket/t/data/f-{i}.parquet",
                content_offset=4,
                content_size_in_bytes=40,
            ),
        )
        if with_deletes
        else ()
    )
    task = ChangeTask(
        data_file=DataFileRef(
            path=f"s3://bucket/t/data/f-{i}.parquet",
            file_format="parquet",
            record_count=1000,
            file_size_in_bytes=65536,
            spec_id=0,
            partition="(day=2026-01-01)",
            data_sequence_number=1,
            split_offsets=(4, 32768),
        ),
        kind=FileChangeKind.MODIFIED if with_deletes else FileChangeKind.ADDED,
        commit=CommitInfo(snapshot_id, None, "append", 1_700_000_000_000 + snapshot_id, snapshot_id, 0),
        deletes_after=deletes,
    )
    return ChangeSplit(task=task, row_group_start=i % 2, row_group_end=(i % 2) + 1, estimated_rows=500)


def make_batch(batch_id: str, from_snapshot: int | None, to_snapshot: int, n_splits: int) -> InflightBatch:
    return InflightBatch(
        batch_id=batch_id,
        from_snapshot_exclusive=from_snapshot,
        to_snapshot_inclusive=to_snapshot,
        to_timestamp_ms=1_700_000_000_000 + to_snapshot,
        splits=tuple(make_split(i, to_snapshot, with_deletes=i % 3 == 0) for i in range(n_splits)),
    )


@pytest.fixture(scope="session")
def pg_available() -> str | None:
    """Why PostgreSQL cannot be used, or None if it can."""
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_URL} unreachable: {exc}"


@pytest.fixture
def pg_schema(pg_available: str | None) -> Iterator[str]:
    """A fresh schema name, dropped with everything in it after the test."""
    if pg_available:
        pytest.skip(pg_available)
    name = f"icetail_t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/nested/dir/state.db"  # tmp_path is absolute: four slashes in all


def pg_url_for(schema: str) -> str:
    return f"{PG_URL}?schema={schema}"


@pytest.fixture(params=["sqlite", "postgres"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for an empty store of the parametrized backend."""
    if backend_kind == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return pg_url_for(request.getfixturevalue("pg_schema"))


@pytest.fixture
def open_test_store(store_url: str) -> Iterator[Callable[..., SqlCheckpointStore]]:
    """Open stores on `store_url` (each call a separate connection); all closed afterwards."""
    opened: list[SqlCheckpointStore] = []

    def opener(**kwargs: Any) -> SqlCheckpointStore:
        store = open_store(store_url, **kwargs)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_test_store: Callable[..., SqlCheckpointStore]) -> SqlCheckpointStore:
    return open_test_store()


def raw_query(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the store's tables directly, bypassing the store (to check what is really on disk)."""
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    base, schema = store_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'SET search_path TO "{schema}"')
        return pg.execute(sql.replace("?", "%s"), params).fetchall()


def raw_create(store_url: str, statements: Sequence[str | tuple[str, tuple[Any, ...]]]) -> None:
    """Write a store directly (`?` placeholders), as an older icetail left it: the store is created, not migrated."""
    steps = [(s, ()) if isinstance(s, str) else s for s in statements]
    if store_url.startswith("sqlite:"):
        import sqlite3

        path = Path(store_url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path)
        with conn:
            for sql, params in steps:
                conn.execute(sql, params)
        conn.close()
        return
    base, schema = store_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
        pg.execute(f'SET search_path TO "{schema}"')
        for sql, params in steps:
            pg.execute(sql.replace("?", "%s"), params)
