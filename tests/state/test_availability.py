"""A store that is locked or whose server dropped the connection fails transiently, then recovers."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path

import psycopg
import pytest

from icetail.kernel.errors import StateError, StateUnavailableError
from icetail.state.checkpoint import Cursor
from icetail.state.sqlite_store import SqliteBackend
from icetail.state.store import SqlCheckpointStore, open_store
from icetail.state.urls import SqliteLocation, parse_store_url
from tests.support.stores import PG_URL


def test_sqlite_locked_by_another_writer_is_transient(sqlite_url: str) -> None:
    open_store(sqlite_url).close()
    location = parse_store_url(sqlite_url)
    assert isinstance(location, SqliteLocation)
    store = SqlCheckpointStore(SqliteBackend(location, busy_timeout_ms=100))
    blocker = sqlite3.connect(location.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StateUnavailableError, match="locked by another process"):
            store.ensure_consumer("c", "cat", "db.t", Cursor.before_first_snapshot())
        assert store.load("c") is None  # WAL: reading goes on while another process writes
        blocker.execute("ROLLBACK")
        store.ensure_consumer("c", "cat", "db.t", Cursor.before_first_snapshot())
    finally:
        blocker.close()
        store.close()


def test_sqlite_file_that_is_not_a_database_is_terminal(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a sqlite database, just text long enough to have a header" * 20)
    with pytest.raises(StateError, match="not a database") as info:
        open_store(f"sqlite:///{path}")
    assert not isinstance(info.value, StateUnavailableError)


def test_postgres_reconnects_after_the_server_drops_the_session(pg_schema: str) -> None:
    app = f"icetail-drop-{uuid.uuid4().hex[:8]}"
    with open_store(f"{PG_URL}?schema={pg_schema}&application_name={app}") as store:
        store.ensure_consumer("c", "cat", "db.t", Cursor(1, 1001))
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchall()
        assert killed == [(True,)]
        with pytest.raises(StateUnavailableError, match="unavailable"):
            store.load("c")
        cp = store.load("c")  # the next call opens a new session
        assert cp is not None and cp.cursor == Cursor(1, 1001)


def test_sqlite_store_on_a_full_disk_is_transient_and_names_the_fix(tmp_path: Path) -> None:
    """Chaos harness (issue 26, `disk-full-state`): SQLITE_FULL was a terminal StateError with the bare
    text; a full disk passes once space is freed, so it is transient and the line says what to do."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("a small filesystem to fill needs root (mount -t tmpfs)")
    disk = tmp_path / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mount -t tmpfs refused here")
    try:
        store = open_store(f"sqlite:///{disk}/state.db")
        store.ensure_consumer("c0", "cat", "db.t", Cursor.before_first_snapshot())
        filler = disk / "filler"
        with open(filler, "wb") as f:
            with pytest.raises(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            with contextlib.suppress(OSError):
                f.close()
        with pytest.raises(StateUnavailableError, match="disk is full") as info:
            for i in range(1, 500):  # each consumer a row; the WAL or the file grows until refused
                store.ensure_consumer(f"c{i}-{'x' * 2000}", "cat", "db.t", Cursor.before_first_snapshot())
        assert "\n" not in str(info.value)
        filler.unlink()
        store.ensure_consumer("after", "cat", "db.t", Cursor.before_first_snapshot())
        assert store.load("after") is not None
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
