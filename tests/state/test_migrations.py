"""Schema versioning: migrate an empty store on open, refuse a store newer than this code."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from icetail.state.checkpoint import Cursor
from icetail.state.errors import StateError
from icetail.state.migrations import LATEST_VERSION, SUPPORTED_VERSIONS, pending_migrations
from icetail.state.store import SqlCheckpointStore, open_store
from tests.state.conftest import raw_query


def test_empty_database_is_migrated_on_open(store: SqlCheckpointStore, store_url: str) -> None:
    assert raw_query(store_url, "SELECT value FROM icetail_meta WHERE key = 'schema_version'") == [
        (str(LATEST_VERSION),)
    ]
    for table in ("icetail_consumers", "icetail_inflight_batches", "icetail_inflight_splits", "icetail_history"):
        assert raw_query(store_url, f"SELECT COUNT(*) FROM {table}") == [(0,)]


def test_reopening_keeps_data(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    first = open_test_store()
    first.ensure_consumer("c", "cat", "db.t", Cursor(1, 1001))
    first.close()
    second = open_test_store()
    cp = second.load("c")
    assert cp is not None and cp.cursor == Cursor(1, 1001)


def test_newer_schema_is_refused(open_test_store: Callable[..., SqlCheckpointStore], store_url: str) -> None:
    open_test_store().close()
    newer = LATEST_VERSION + 7
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE icetail_meta SET value = ? WHERE key = 'schema_version'", (str(newer),))
        conn.close()
    else:
        import psycopg

        base, schema = store_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            pg.execute(f'UPDATE "{schema}".icetail_meta SET value = %s WHERE key = %s', (str(newer), "schema_version"))
    with pytest.raises(StateError) as info:
        open_store(store_url)
    message = str(info.value)
    assert f"schema version {newer}" in message
    assert ", ".join(map(str, SUPPORTED_VERSIONS)) in message
    assert "upgrade icetail" in message
    # the refusal changed nothing
    assert raw_query(store_url, "SELECT value FROM icetail_meta WHERE key = 'schema_version'") == [(str(newer),)]


def test_garbage_version_is_refused(open_test_store: Callable[..., SqlCheckpointStore], store_url: str) -> None:
    open_test_store().close()
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE icetail_meta SET value = 'x1' WHERE key = 'schema_version'")
        conn.close()
    else:
        import psycopg

        base, schema = store_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            pg.execute(f"UPDATE \"{schema}\".icetail_meta SET value = 'x1' WHERE key = 'schema_version'")
    with pytest.raises(StateError, match="unreadable schema version 'x1'"):
        open_store(store_url)


def test_concurrent_first_opens_migrate_once(store_url: str) -> None:
    """Several processes starting at once against an empty database must not trip over each other."""
    errors: list[BaseException] = []
    stores: list[SqlCheckpointStore] = []

    def opener() -> None:
        try:
            stores.append(open_store(store_url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    assert raw_query(store_url, "SELECT COUNT(*) FROM icetail_meta") == [(1,)]


def test_pending_migrations_message_lists_supported_versions() -> None:
    assert pending_migrations(0, "x")[0].version == 1
    assert pending_migrations(LATEST_VERSION, "x") == ()
    with pytest.raises(StateError, match=r"supports only schema versions 1\b.*upgrade icetail"):
        pending_migrations(LATEST_VERSION + 1, "sqlite:///s.db")
