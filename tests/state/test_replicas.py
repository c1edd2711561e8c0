"""The replica registry (schema 10) on both backends: heartbeats on the database clock, rosters of a
configuration's live replicas and its consumers' leases, leaving, the one-host rule of SQLite, and
the migration of a schema 9 store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from icetail.kernel.errors import ConfigError
from icetail.kernel.processes import host_name
from icetail.monitor.cli.main import main as cli_main
from icetail.state.checkpoint import Cursor
from icetail.state.migrations import LATEST_VERSION, META_DDL, MIGRATIONS
from icetail.state.replicas import ReplicaId, ReplicaRegistry, group_key
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import raw_create, raw_query

START = Cursor.before_first_snapshot()
GROUP = group_key(["a", "b", "c"])


def _dead_pid() -> int:
    """A pid of this host that no longer runs (a child that exited)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(child.stdout)


def test_group_key_names_the_consumers_in_any_order() -> None:
    assert group_key(["c", "a", "b"]) == GROUP != group_key(["a", "b"])


def test_heartbeat_roster_expiry_and_leave(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    store = open_test_store()
    registry = ReplicaRegistry(store)
    me = ReplicaId.of_this_process()
    # other replicas of this host: running processes (an older token of this pid counts as gone)
    other, short, elsewhere = (ReplicaId(me.host, os.getppid(), token) for token in ("0ther", "5h0rt", "e15e"))
    registry.heartbeat(me, GROUP, 60)
    registry.heartbeat(other, GROUP, 60)
    registry.heartbeat(elsewhere, group_key(["x"]), 60)  # another configuration
    expires = registry.heartbeat(short, GROUP, 0.001)
    deadline = time.monotonic() + 10
    while True:  # the short heartbeat expires on the database clock
        roster = registry.roster(me, GROUP, ["a", "b", "c"])
        if roster.now_ms >= expires or time.monotonic() > deadline:
            break
    assert [r.name for r in roster.live] == sorted([me.name, other.name])
    assert {me.name, other.name, short.name} <= roster.registered
    assert roster.leases == {"a": None, "b": None, "c": None} and roster.free() == 3
    registry.leave(other)
    assert [r.name for r in registry.roster(me, GROUP, ["a"]).live] == [me.name]
    assert other.name not in {r.name for r, _ in registry.replicas()}


def test_roster_names_each_consumers_holder(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    store = open_test_store()
    registry = ReplicaRegistry(store)
    me = ReplicaId.of_this_process()
    gone = ReplicaId(me.host, _dead_pid(), "deadbeef")  # a replica of this host whose process is gone
    for consumer in ("a", "b", "c", "d"):
        store.ensure_consumer(consumer, "cat", f"db.{consumer}", START)
    store.acquire_lease("a", me.name, 60)
    store.acquire_lease("b", "elsewhere:1:feedf00d", 60)
    store.acquire_lease("c", gone.name, 60)
    registry.heartbeat(gone, GROUP, 60)
    roster = registry.roster(me, GROUP, ["a", "b", "c", "d", "never-created"])
    assert roster.holder("a") == me.name and roster.holder("b") == "elsewhere:1:feedf00d"
    assert roster.holder("c") is None  # its holder's process is gone: free at once, as `run` takes it
    assert gone.name not in {r.name for r in roster.live}
    assert (roster.held_by(me.name), roster.free()) == (1, 3)  # c, d, never-created


def test_a_sqlite_store_refuses_a_replica_of_another_host(
    open_test_store: Callable[..., SqlCheckpointStore], backend_kind: str
) -> None:
    registry = ReplicaRegistry(open_test_store())
    registry.heartbeat(ReplicaId("other-host", 4242, "0badc0de"), GROUP, 60)
    me = ReplicaId.of_this_process()
    if backend_kind == "postgres":  # a store several hosts share
        registry.heartbeat(me, GROUP, 60)
        assert len(registry.roster(me, GROUP, ["a"]).live) == 2
        return
    with pytest.raises(ConfigError) as info:
        registry.heartbeat(me, GROUP, 60)
    message = str(info.value)
    assert "\n" not in message and "other-host" in message and "--state postgresql://" in message


def test_a_schema_9_store_is_migrated_and_keeps_its_leases(store_url: str) -> None:
    raw_create(
        store_url,
        [
            META_DDL,
            *(s for m in MIGRATIONS if m.version <= 9 for s in m.statements),
            "INSERT INTO icetail_meta VALUES ('schema_version', '9')",
            "INSERT INTO icetail_consumers (consumer, catalog_name, table_name, cursor_snapshot_id, "
            "cursor_timestamp_ms, generation, lease_owner, lease_expires_at_ms, created_at_ms, updated_at_ms, "
            "sink_url, branch) VALUES ('old', 'cat', 'db.t', 5, 1005, 3, 'h:1:t', 99000000000000, 1, 1, 'p', 'main')",
        ],
    )
    with open_store(store_url) as store:
        checkpoint = store.load("old")
        assert checkpoint is not None and checkpoint.lease is not None
        assert (checkpoint.lease.owner, checkpoint.cursor.snapshot_id) == ("h:1:t", 5)
        me = ReplicaId.of_this_process()
        ReplicaRegistry(store).heartbeat(me, GROUP, 30)
        assert ReplicaRegistry(store).roster(me, GROUP, ["old"]).holder("old") == "h:1:t"
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)] == [("10",)]


def test_status_names_each_consumers_holder_and_the_live_replicas(
    store: SqlCheckpointStore, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = ReplicaRegistry(store)
    me = ReplicaId(host_name(), os.getppid(), "5e7e")  # a replica running here (status runs in this process)
    registry.heartbeat(me, GROUP, 60)
    registry.heartbeat(ReplicaId(me.host, _dead_pid(), "90ne"), GROUP, 60)  # its process is gone: not alive
    store.ensure_consumer("held", "cat", "db.held", START, sink="parquet:///o/h")
    store.ensure_consumer("free", "cat", "db.free", START, sink="parquet:///o/f")
    store.acquire_lease("held", me.name, 60)
    assert cli_main(["status", "--state", store_url]) == 0
    lines = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["held"].endswith(f"; held by {me.name}") and "held by" not in lines["free"]
    assert lines["serve replicas alive"] == f"serve replicas alive: {me.name}"
