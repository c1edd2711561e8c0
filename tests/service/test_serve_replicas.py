"""`icetail serve` replicas sharing one configuration (issue 35 s1), as real processes on one
PostgreSQL store over six real tables (a pyiceberg SqlCatalog on SQLite in tmp_path).

One test, as the JVM starts dominate: three replicas divide the six consumers two each, and none
logs a failed cycle for a consumer another holds; one replica frozen (SIGSTOP: it cannot renew,
its process still runs, as a host cut off) loses its consumers to the others within the lease TTL
plus a poll, and is then killed; one stopped with SIGTERM hands its consumers over at once (well
within the TTL); a replica that joins takes its share from the last one at batch boundaries. Every
appended row is in the sink exactly once and every consumer's history is one unbroken chain of
batches, read from the store, not from the logs.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from icetail.state.replicas import ReplicaId, ReplicaRegistry, Roster, group_key
from icetail.state.store import open_store
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ID_NAME,
    NAMESPACE,
    Child,
    Serve,
    Warehouse,
    free_port,
    id_name_rows,
    sample,
    wait_until,
)
from tests.support.stores import drop_state, new_state_url, pg_unavailable

pytestmark = pytest.mark.once  # long: real processes, a JVM each

TABLES = [f"t{i}" for i in range(6)]
CONSUMERS = [f"{CATALOG_NAME}.{NAMESPACE}.{t}" for t in TABLES]
TTL_S = 8.0
INTERVAL_S = 1.0
STARTUP_S = 240.0  # three JVMs starting together on a busy 2-core machine
CATCH_UP_S = 120.0
ROWS_PER_APPEND = 5


@pytest.fixture
def pg_state(tmp_path: Path) -> Iterator[str]:
    if reason := pg_unavailable():
        pytest.skip(reason)
    url = new_state_url("postgresql", tmp_path)
    yield url
    drop_state(url)


class Cluster:
    """The replicas, the tables, and what the test appended to each."""

    def __init__(self, tmp_path: Path, warehouse: Warehouse, children: list[Child], state: str) -> None:
        self.tmp_path, self.warehouse, self.children, self.state = tmp_path, warehouse, children, state
        self.sink = tmp_path / "sink"
        self.config = tmp_path / "icetail.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "catalog": CATALOG_NAME,
                    "state": state,
                    "sink": f"parquet://{self.sink}",
                    "interval": f"{INTERVAL_S}s",
                    "lease_ttl": f"{TTL_S}s",
                    "metrics_host": "127.0.0.1",
                    "tables": [{"table": f"{NAMESPACE}.{t}"} for t in TABLES],
                }
            )
        )
        self.appended: dict[str, list[int]] = {c: [] for c in CONSUMERS}
        self.next_id = 0
        self.tables = {t: warehouse.create_table(t, ID_NAME) for t in TABLES}

    def start(self, name: str) -> Serve:
        port = free_port()
        serve = Serve(
            ["--config", str(self.config), "--metrics-port", str(port)],
            env=child_env(extra=self.warehouse.env()),
            cwd=self.tmp_path,
            name=name,
            port=port,
        )
        self.children.append(serve)
        return serve

    def append_all(self) -> None:
        for table, consumer in zip(TABLES, CONSUMERS, strict=True):
            ids = range(self.next_id, self.next_id + ROWS_PER_APPEND)
            self.next_id += ROWS_PER_APPEND
            self.tables[table] = self.warehouse.load(table)
            self.tables[table].append(id_name_rows(ids))
            self.appended[consumer].extend(ids)

    def roster(self) -> Roster:
        with open_store(self.state) as store:
            return ReplicaRegistry(store).roster(ReplicaId("test", 0, "0"), group_key(CONSUMERS), CONSUMERS)

    def holdings(self) -> dict[int, list[str]]:
        """Consumers by the pid of the replica that holds them."""
        roster = self.roster()
        held: dict[int, list[str]] = {}
        for consumer in CONSUMERS:
            holder = roster.holder(consumer)
            if holder is not None:
                held.setdefault(int(holder.split(":")[1]), []).append(consumer)
        return held

    def caught_up(self) -> bool:
        with open_store(self.state) as store:
            for table, consumer in zip(TABLES, CONSUMERS, strict=True):
                checkpoint = store.load(consumer)
                current = self.warehouse.load(table).metadata.current_snapshot_id
                if checkpoint is None or checkpoint.cursor.snapshot_id != current or checkpoint.inflight is not None:
                    return False
        return True

    def wait_divided(self, pids: dict[int, int], timeout: float, what: str) -> dict[int, list[str]]:
        """Until every consumer is held, each replica `pid` holding `pids[pid]` of them, and all caught up."""

        def probe() -> dict[int, list[str]] | None:
            held = self.holdings()
            counts = {pid: len(held.get(pid, [])) for pid in pids}
            if counts == pids and sum(counts.values()) == len(CONSUMERS) and self.caught_up():
                return held
            return None

        return wait_until(probe, timeout=timeout, what=what, interval=0.25)


def owned(serve: Serve) -> set[str]:
    """The consumers whose `icetail_consumer_owned` is 1 on this replica."""
    return {
        dict(labels)["consumer"]
        for (name, labels), value in serve.samples().items()
        if name == "icetail_consumer_owned" and value == 1
    }


def handovers(serve: Serve, cause: str) -> float:
    return sum(
        value
        for (name, labels), value in serve.samples().items()
        if name == "icetail_handovers_total" and dict(labels)["cause"] == cause
    )


def assert_seen_from_outside(held: dict[int, list[str]], *replicas: Serve) -> None:
    """Each replica's metrics name the consumers the store says it holds, and count the live replicas;
    each is ready (it holds its share and each of its consumers delivers)."""
    for serve in replicas:
        wait_until(
            lambda serve=serve: sample(serve.samples(), "icetail_replicas_alive") == len(replicas),
            timeout=30,
            what=f"{serve.name} counting {len(replicas)} replicas",
            interval=0.2,
        )
        assert owned(serve) == set(held.get(serve.pid, [])), serve.name
        serve.wait_status("/readyz", 200, 30)


def assert_no_failed_cycles(*replicas: Serve) -> None:
    for serve in replicas:
        failed = [
            e
            for e in serve.events()
            if e.get("msg") in ("cycle failed", "consumer stopped; the other consumers keep delivering")
        ]
        assert not failed, f"{serve.name} logged failed cycles: {failed[:3]}"


def assert_exactly_once(cluster: Cluster) -> None:
    """Each table's appended ids are in the sink once each, and its history is one unbroken chain."""
    delivered: dict[str, Counter[int]] = {c: Counter() for c in CONSUMERS}
    for path in cluster.sink.rglob("*.parquet"):
        consumer = next(c for c in CONSUMERS if path.name.startswith(f"{c}-"))
        delivered[consumer].update(pq.read_table(path).column("id").to_pylist())
    for consumer in CONSUMERS:
        assert sorted(delivered[consumer].elements()) == sorted(cluster.appended[consumer]), consumer
    with open_store(cluster.state) as store:
        for consumer in CONSUMERS:
            chain = list(reversed(store.history(consumer)))
            assert chain and chain[0].from_snapshot_exclusive is None, consumer
            for before, after in zip(chain, chain[1:], strict=False):
                assert after.from_snapshot_exclusive == before.to_snapshot_inclusive, (consumer, chain)


def test_replicas_divide_consumers_take_over_a_frozen_one_and_hand_over_on_sigterm_and_join(
    tmp_path: Path, warehouse: Warehouse, children: list[Child], pg_state: str
) -> None:
    cluster = Cluster(tmp_path, warehouse, children, pg_state)
    cluster.append_all()
    a, b, c = (cluster.start(name) for name in ("a", "b", "c"))
    cluster.wait_divided({a.pid: 2, b.pid: 2, c.pid: 2}, STARTUP_S, "three replicas holding two consumers each")
    cluster.append_all()
    held = cluster.wait_divided({a.pid: 2, b.pid: 2, c.pid: 2}, CATCH_UP_S, "the second appends delivered")
    assert len(cluster.roster().live) == 3
    assert_no_failed_cycles(a, b, c)
    assert_seen_from_outside(held, a, b, c)

    # a frozen replica cannot renew: its consumers move once its leases expire
    a.signal(signal.SIGSTOP)
    frozen = time.monotonic()
    cluster.append_all()
    moved = cluster.wait_divided({b.pid: 3, c.pid: 3}, TTL_S + CATCH_UP_S, "a's consumers taken over")
    taken = time.monotonic() - frozen
    assert set(moved[b.pid] + moved[c.pid]) >= set(held[a.pid])
    # each of a's consumers was taken over once, from its expired lease, by b or c
    assert handovers(b, "expired") + handovers(c, "expired") == len(held[a.pid])
    a.kill_group()
    # taken over within the TTL plus a poll (and the beat that sees it), with time to deliver the appends
    assert taken < TTL_S + 2 * INTERVAL_S + 60, taken

    # SIGTERM hands over at once: the leases are released, not left to expire
    b.signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert b.wait(60) == 0
    released = time.monotonic()
    wait_until(
        lambda: len(cluster.holdings().get(c.pid, [])) == len(CONSUMERS),
        timeout=TTL_S,
        what="c holding every consumer before b's leases could expire",
        interval=0.1,
    )
    assert time.monotonic() - released < TTL_S, time.monotonic() - stopped
    cluster.append_all()
    cluster.wait_divided({c.pid: 6}, CATCH_UP_S, "c delivering every table")

    # a replica that joins takes its share; the other hands consumers over at batch boundaries
    joined_before = handovers(c, "joined")
    d = cluster.start("d")
    cluster.wait_divided({c.pid: 3, d.pid: 3}, STARTUP_S, "c and d holding three each")
    assert handovers(c, "joined") - joined_before == 3  # released above the new share, for d
    cluster.append_all()
    held = cluster.wait_divided({c.pid: 3, d.pid: 3}, CATCH_UP_S, "the last appends delivered")
    assert_seen_from_outside(held, c, d)
    assert_no_failed_cycles(b, c, d)
    assert_exactly_once(cluster)


def test_a_sqlite_store_refuses_a_replica_of_another_host(
    tmp_path: Path, warehouse: Warehouse, children: list[Child]
) -> None:
    """One line naming the PostgreSQL store, exit 2, before Spark or the metrics server start."""
    state = f"sqlite:///{tmp_path}/state.db"
    with open_store(state) as store:
        ReplicaRegistry(store).heartbeat(ReplicaId("other-host", 4242, "0badc0de"), group_key(CONSUMERS[:1]), 600)
    warehouse.create_table(TABLES[0], ID_NAME)
    serve = Serve(
        [
            "--catalog",
            CATALOG_NAME,
            "--table",
            f"{NAMESPACE}.{TABLES[0]}",
            "--state",
            state,
            "--sink",
            f"parquet://{tmp_path / 'sink'}",
            "--metrics-port",
            str(free_port()),
        ],
        env=child_env(extra=warehouse.env()),
        cwd=tmp_path,
        name="refused",
        port=0,
    )
    children.append(serve)
    assert serve.wait(60) == 2
    errors = [line for line in serve.stderr().splitlines() if "other-host" in line]
    assert len(errors) == 1 and "--state postgresql://" in errors[0], serve.diagnostics()
