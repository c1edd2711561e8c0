"""Fixtures for the checkpoint store tests: real SQLite files and the real PostgreSQL.

Every PostgreSQL test gets its own schema (dropped afterwards), so tests can run in parallel
and leave nothing behind. Set ICETAIL_TEST_PG_URL to point at another server; if none is
reachable the PostgreSQL cases are skipped with the reason, never faked.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import PG_URL, pg_url_for
from tests.support.stores import pg_unavailable


@pytest.fixture(scope="session")
def pg_available() -> str | None:
    """Why PostgreSQL cannot be used, or None if it can."""
    return pg_unavailable()


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
    (tmp_path / "nested" / "dir").mkdir(parents=True)  # icetail creates no folder for a SQLite store
    return f"sqlite:///{tmp_path}/nested/dir/state.db"  # tmp_path is absolute: four slashes in all




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




