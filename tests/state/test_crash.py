"""Crash safety: a writer killed with SIGKILL in the middle of a transaction changes nothing.

A child process runs a real store operation and is stopped at a known point between two of its
statements, then killed. SQLite: its trace hook (a SqliteBackend option) pauses the child just
before the chosen statement, and the test confirms the child holds the write lock at that
moment. PostgreSQL: the test holds a SHARE lock on the splits table, so the child blocks on its
first write to that table, and pg_stat_activity confirms where it waits.
"""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from icetail.state.checkpoint import Checkpoint, Cursor
from icetail.state.store import open_store
from tests.support.checkpoints import make_batch, raw_query
from tests.support.processes import REPO_ROOT
from tests.support.stores import PG_URL

CHILD = r"""
import sys, time
from icetail.state.store import SqlCheckpointStore, open_store
from icetail.state.urls import parse_store_url
from tests.support.checkpoints import make_batch

url, operation, pause_prefix, pause_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = 0

def trace(sql):
    global seen
    if pause_prefix and sql.startswith(pause_prefix):
        seen += 1
        if seen == pause_at:
            print("PAUSED", flush=True)
            time.sleep(60)

if url.startswith("sqlite:"):
    from icetail.state.sqlite_store import SqliteBackend
    store = SqlCheckpointStore(SqliteBackend(parse_store_url(url), trace=trace))
else:
    store = open_store(url)
print("OPEN", flush=True)
if operation == "finish":
    store.finish_batch("c", "b1")
else:
    store.begin_batch("c", make_batch("b1", None, 10, 200))
print("DONE", flush=True)
"""

# operation -> (statement the child is stopped before, which occurrence of it)
PAUSE_POINTS = {
    "finish": ("DELETE FROM icetail_inflight_splits", 1),  # cursor moved and history written already
    "begin": ("INSERT INTO icetail_inflight_splits", 50),  # batch row and 49 splits written already
}


def _wait_line(proc: subprocess.Popen[bytes], expected: bytes, timeout: float = 20) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip() == expected:
            return
    proc.kill()
    _, err = proc.communicate(timeout=10)
    raise AssertionError(f"child never printed {expected!r}; stderr:\n{err.decode()}")


def _spawn(url: str, operation: str, pause: bool) -> subprocess.Popen[bytes]:
    prefix, at = PAUSE_POINTS[operation] if pause else ("", 0)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, operation, prefix, str(at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() must see every line the child prints
        env=env,
        cwd=REPO_ROOT,
    )


def _prepare(url: str, operation: str) -> Checkpoint:
    with open_store(url) as store:
        store.ensure_consumer("c", "cat", "db.t", Cursor.before_first_snapshot())
        if operation == "finish":
            batch = make_batch("b1", None, 10, 3)
            store.begin_batch("c", batch)
            for i, split_id in enumerate(batch.split_ids):
                store.commit_chunk("c", "b1", split_id, 100 + i, 10 + i, True, f"tok-{i}")
        before = store.load("c")
    assert before is not None
    return before


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def _assert_unchanged(url: str, before: Checkpoint) -> None:
    with open_store(url) as store:
        after = store.load("c")
        assert after is not None
        assert (after.cursor, after.generation, after.inflight) == (before.cursor, before.generation, before.inflight)
        assert store.history("c") == ()
    assert raw_query(url, "SELECT COUNT(*) FROM icetail_history") == [(0,)]
    expected_splits = 0 if before.inflight is None else len(before.inflight.batch.splits)
    assert raw_query(url, "SELECT COUNT(*) FROM icetail_inflight_splits") == [(expected_splits,)]


def _finish_after_recovery(url: str, operation: str) -> None:
    """The store is usable again: the interrupted operation now completes."""
    with open_store(url) as store:
        if operation == "finish":
            assert store.finish_batch("c", "b1").rows == 10 + 11 + 12
            cp = store.load("c")
            assert cp is not None and cp.cursor.snapshot_id == 10
        else:
            store.begin_batch("c", make_batch("b1", None, 10, 200))
            cp = store.load("c")
            assert cp is not None and cp.inflight is not None and len(cp.inflight.batch.splits) == 200


@pytest.mark.parametrize("operation", ["finish", "begin"])
def test_sqlite_kill_mid_transaction_keeps_previous_state(sqlite_url: str, operation: str) -> None:
    before = _prepare(sqlite_url, operation)
    child = _spawn(sqlite_url, operation, pause=True)
    try:
        _wait_line(child, b"PAUSED")
        probe = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")  # the child is inside its write transaction
        probe.close()
    finally:
        _kill(child)
    _assert_unchanged(sqlite_url, before)
    _finish_after_recovery(sqlite_url, operation)


@pytest.mark.parametrize("operation", ["finish", "begin"])
def test_postgres_kill_mid_transaction_keeps_previous_state(pg_schema: str, operation: str) -> None:
    app = f"icetail-crash-{uuid.uuid4().hex[:8]}"
    url = f"{PG_URL}?schema={pg_schema}"
    before = _prepare(url, operation)
    with psycopg.connect(PG_URL) as locker:  # not autocommit: the lock lasts until rollback
        locker.execute(f'LOCK TABLE "{pg_schema}".icetail_inflight_splits IN SHARE MODE')
        child = _spawn(f"{url}&application_name={app}", operation, pause=False)
        try:
            _wait_line(child, b"OPEN")
            waiting = f"{PAUSE_POINTS[operation][0]}%"
            deadline = time.monotonic() + 15
            with psycopg.connect(PG_URL, autocommit=True) as watcher:
                while True:
                    rows = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event_type = 'Lock' AND query LIKE %s",
                        (app, waiting),
                    ).fetchall()
                    if rows[0][0] == 1:
                        break
                    assert time.monotonic() < deadline, "child never blocked inside its transaction"
                    time.sleep(0.02)
        finally:
            _kill(child)
        locker.rollback()
    _assert_unchanged(url, before)
    _finish_after_recovery(url, operation)
