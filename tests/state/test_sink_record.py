"""The sink recorded per consumer (schema version 2) and stores opened without creating anything.

Both run unchanged against SQLite and PostgreSQL. A consumer delivers to one sink: the store
records it at creation (or, for a consumer made before version 2, at its next run) and
`change_sink` is the operator's way to move it. `open_store(create=False)` is what `status`
and `reset` use: it must refuse, and leave untouched, any database without icetail's tables.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from icetail.kernel.errors import ConfigError, StateBusyError, StateConflictError
from icetail.state.checkpoint import Cursor
from icetail.state.migrations import _V1, LATEST_VERSION
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_batch, pg_url_for, raw_create, raw_query
from tests.support.stores import PG_URL

START = Cursor.before_first_snapshot()


def test_the_sink_is_recorded_at_creation_and_kept(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START, "parquet:///out/a")
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.sink == "parquet:///out/a"
    # recording again returns what is recorded: the caller compares and refuses a different one
    assert store.record_sink("c", "parquet:///out/b") == "parquet:///out/a"
    assert [s.sink for s in store.list_consumers()] == ["parquet:///out/a"]


def test_a_consumer_without_a_sink_gets_the_first_one_recorded(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    assert store.load("c").sink is None  # type: ignore[union-attr]
    store.acquire_lease("c", "me", 60)
    assert store.record_sink("c", "jsonl:///out/c.jsonl", owner="me") == "jsonl:///out/c.jsonl"
    assert store.record_sink("c", "parquet:///other", owner="me") == "jsonl:///out/c.jsonl"


def test_change_sink_is_fenced_and_refused_while_a_batch_is_in_flight(
    open_test_store: Callable[..., SqlCheckpointStore],
) -> None:
    store = open_test_store()
    store.ensure_consumer("c", "cat", "db.t", START, "parquet:///old")
    store.acquire_lease("c", "runner", 60)
    with pytest.raises(StateBusyError, match="runner"):
        store.change_sink("c", "parquet:///new")  # an operator write while a run holds the consumer
    store.release_lease("c", "runner")
    store.begin_batch("c", make_batch("b1", None, 10, 2))
    with pytest.raises(StateConflictError, match="b1 in flight.*parquet:///old"):
        store.change_sink("c", "parquet:///new")
    store.abandon_batch("c", "b1")
    store.change_sink("c", "parquet:///new")
    assert store.load("c").sink == "parquet:///new"  # type: ignore[union-attr]


def test_a_version_1_store_is_migrated_and_its_consumers_keep_no_sink(store_url: str) -> None:
    """A store written by the previous release: version 2 adds the column, consumers keep their state."""
    statements = [
        *_V1,
        "CREATE TABLE icetail_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO icetail_meta VALUES ('schema_version', '1')",
        "INSERT INTO icetail_consumers VALUES ('old', 'cat', 'db.t', 5, 1005, 3, NULL, NULL, 1, 1)",
    ]
    raw_create(store_url, statements)
    with open_store(store_url, create=False) as store:  # status/reset migrate icetail's own store forward
        checkpoint = store.load("old")
        assert checkpoint is not None and checkpoint.cursor == Cursor(5, 1005) and checkpoint.sink is None
        assert store.record_sink("old", "parquet:///out") == "parquet:///out"
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]


# --------------------------------------------------------------------------------------------
# create=False: status and reset
# --------------------------------------------------------------------------------------------


def test_open_without_create_refuses_a_missing_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "state.db"
    with pytest.raises(ConfigError, match="no checkpoint store at"):
        open_store(f"sqlite:///{missing}", create=False)
    assert not missing.parent.exists()


def test_open_without_create_refuses_and_leaves_alone_another_programs_sqlite_database(tmp_path: Path) -> None:
    """pyiceberg's catalog.db: no icetail table is created and not even the journal mode changes."""
    path = tmp_path / "catalog.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE iceberg_tables (catalog_name TEXT, table_name TEXT)")
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(ConfigError) as caught:
        open_store(f"sqlite:///{path}", create=False)
    assert str(caught.value) == (
        f"checkpoint store sqlite:///{path} holds no icetail state (no icetail_meta table); check --state, "
        "or create the store with `icetail run`"
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.db"]  # no -wal / -shm left behind


def test_open_without_create_refuses_a_postgres_schema_without_icetail(pg_schema: str) -> None:
    with pytest.raises(ConfigError, match="holds no icetail state"):
        open_store(pg_url_for(pg_schema), create=False)
    with psycopg.connect(PG_URL, autocommit=True) as pg:
        found = pg.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (pg_schema,)).fetchall()
        assert found == []  # the schema was not created
        pg.execute(f'CREATE SCHEMA "{pg_schema}"')
        pg.execute(f'CREATE TABLE "{pg_schema}".someone_elses (x INT)')
    with pytest.raises(ConfigError, match="holds no icetail state"):
        open_store(pg_url_for(pg_schema), create=False)
    with psycopg.connect(PG_URL, autocommit=True) as pg:
        tables = pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg_schema,)
        ).fetchall()
    assert tables == [("someone_elses",)]


def test_open_without_create_opens_an_icetail_store(store_url: str) -> None:
    with open_store(store_url) as created:
        created.ensure_consumer("c", "cat", "db.t", START, "-")
    with open_store(store_url, create=False) as store:
        assert [s.consumer for s in store.list_consumers()] == ["c"]
