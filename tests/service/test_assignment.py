"""Replicas' shares of one configuration, decided from a real store's roster (SQLite and PostgreSQL):
claims up to the fair share, skips of consumers held elsewhere, hand-overs only when peers have room."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.assignment import Assignment, beat_seconds, fair_share
from icetail.state.checkpoint import Cursor
from icetail.state.replicas import ReplicaId, ReplicaRegistry, group_key, starting_key
from icetail.state.store import open_store
from tests.support.stores import PG_URL, drop_state, new_state_url, pg_unavailable

CONSUMERS = [f"c{i}" for i in range(5)]


def test_fair_share_and_beat() -> None:
    assert [fair_share(10, n) for n in (1, 2, 3, 4, 0)] == [10, 5, 4, 3, 10]
    assert beat_seconds(5, 30) == 5 and beat_seconds(60, 30) == 5 and beat_seconds(1, 30) == 1
    assert beat_seconds(0.01, 3) == 0.2  # never a busy loop


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgresql" and (reason := pg_unavailable()):
        pytest.skip(reason)
    url = new_state_url(request.param, tmp_path)
    yield url
    drop_state(url)


def _configs(state_url: str) -> list[PipelineConfig]:
    return [PipelineConfig("cat", f"db.{c}", state_url, "parquet:///s", consumer=c) for c in CONSUMERS]


def test_claims_up_to_the_share_skip_held_consumers_and_hand_over_when_peers_have_room(state_url: str) -> None:
    configs = _configs(state_url)
    held: set[str] = set()
    mine = Assignment(configs, lambda url: len(held), beat_s=1)
    peer = ReplicaId(mine.me.host, os.getppid(), "9ee79ee7")  # a live process of this host
    with open_store(state_url) as store:
        for c in CONSUMERS:
            store.ensure_consumer(c, "cat", f"db.{c}", Cursor.before_first_snapshot())
        registry = ReplicaRegistry(store)
        registry.heartbeat(peer, group_key(CONSUMERS), 60)
        store.acquire_lease("c0", peer.name, 60)
        mine.start(lambda: None)
        try:
            with mine.claim(configs[0]) as refused:
                assert refused == f"leased to {peer.name}"
            for config in configs[1:]:  # two replicas: a share of 3
                with mine.claim(config) as refused:
                    if refused is None:
                        store.acquire_lease(config.consumer_id, mine.owner, 60)
                        held.add(config.consumer_id)
            assert held == {"c1", "c2", "c3"}
            assert mine.replicas_alive() == 2 and mine.over_share() is None  # at its share: ready
            with mine.claim(configs[4]) as refused:
                assert refused is not None and "holds its share (3) of 5" in refused
            assert mine.should_release(configs[1]) is None  # at its share
            registry.leave(peer)  # alone: a share of 5
            mine.beat()
            with mine.claim(configs[4]) as refused:
                assert refused is None
            store.acquire_lease("c4", mine.owner, 60)
            held.add("c4")
            store.release_lease("c0", peer.name)
            assert mine.should_release(configs[1]) is None  # nobody else to take it
            third = ReplicaId(mine.me.host, os.getppid(), "7h1rd000")
            registry.heartbeat(peer, group_key(CONSUMERS), 60)
            registry.heartbeat(third, group_key(CONSUMERS), 60)
            mine.beat()  # three replicas: a share of 2; c0 is free, the peers have room for 4
            assert mine.should_release(configs[1]) is not None
            assert mine.should_release(configs[2]) is None  # one hand-over per roster
            assert mine.replicas_alive() == 3
            assert mine.over_share() == (
                "this replica holds 4 of 5 consumers, above its share of 2 among 3 replicas; "
                "handing over at the next batch boundary"
            )
            held.clear()  # the others hold everything: nothing held is within the share
            assert mine.over_share() is None
        finally:
            mine.stop()
        assert [r.name for r, _ in registry.replicas()] == sorted([peer.name, third.name])


def test_a_claim_takes_over_only_from_a_replica_whose_lease_is_no_longer_held(state_url: str) -> None:
    """`expired_holder`: the hand-over cause `expired` is a lease of a registered replica that no
    longer holds it (its process gone here: this pid under another token, as after a restart)."""
    configs = _configs(state_url)
    mine = Assignment(configs, lambda url: 0, beat_s=1)
    assert mine.replicas_alive() == 1  # alone before a first roster
    gone = ReplicaId(mine.me.host, os.getpid(), "90ne0000")
    live = ReplicaId(mine.me.host, os.getppid(), "11fe0000")
    not_a_replica = ReplicaId(mine.me.host, os.getpid(), "0run0000")  # a `run` that died: never registered
    with open_store(state_url) as store:
        for c in CONSUMERS:
            store.ensure_consumer(c, "cat", f"db.{c}", Cursor.before_first_snapshot())
        registry = ReplicaRegistry(store)
        for replica in (gone, live):
            registry.heartbeat(replica, group_key(CONSUMERS), 60)
        store.acquire_lease("c0", gone.name, 60)
        store.acquire_lease("c1", live.name, 60)
        store.acquire_lease("c2", not_a_replica.name, 60)
        mine.start(lambda: None)
        try:
            store.acquire_lease("c3", mine.owner, 60)
            mine.beat()
            assert mine.expired_holder(configs[0]) == gone.name
            assert [mine.expired_holder(c) for c in configs[1:]] == [None, None, None, None]
            assert mine.replicas_alive() == 2  # itself and the live peer: a gone process is not alive
        finally:
            mine.stop()


def test_replicas_of_a_pattern_stay_one_group_while_they_see_its_tables_at_different_polls(
    state_url: str, tmp_path: Path
) -> None:
    """A table created under a pattern is found by each replica at its own next poll: until then one
    replica holds a consumer more than the other. Their registry group is the configuration's (its
    plain consumers and its patterns), not the tables found so far, so they keep counting each other
    as one group, and their fair shares, across that window."""
    import yaml

    from icetail.monitor.cli.main import build_parser
    from icetail.monitor.service.config import build_service_config

    path = tmp_path / "icetail.yaml"
    entry = {"namespace": "sales", "include": "orders_*", "sink": f"parquet://{tmp_path}/out"}
    path.write_text(yaml.safe_dump({"catalog": "cat", "state": state_url, "tables": [entry]}))
    config = build_service_config(build_parser().parse_args(["serve", "--config", str(path)]), environ={})
    (pattern,) = config.patterns
    ahead = Assignment((), lambda url: 0, beat_s=1, patterns=[pattern])
    behind = Assignment((), lambda url: 0, beat_s=1, patterns=[pattern])
    # two live replicas of this host (one process here: a replica whose pid is this process's own
    # but whose token is not counts as an older run of it, gone)
    ahead.me = ReplicaId(ahead.me.host, os.getppid(), "a7ead000")
    behind.me = ReplicaId(ahead.me.host, os.getppid(), "b3h1nd00")
    ahead.add(pattern.pipeline("orders_eu"))  # found by one replica's poll, not yet by the other's
    with open_store(state_url) as store:
        store.ensure_consumer(
            pattern.pipeline("orders_eu").consumer_id, "cat", "sales.orders_eu", Cursor.before_first_snapshot()
        )
    try:
        behind.beat(first=True)
        ahead.beat(first=True)
        assert ahead.replicas_alive() == 2
        behind.beat()
        assert behind.replicas_alive() == 2
        ahead.add(pattern.pipeline("orders_us"))  # more tables found: still the same group
        ahead.beat()
        assert ahead.replicas_alive() == 2
    finally:
        for replica in (ahead, behind):
            replica.stop()


def test_a_replica_whose_spark_session_starts_is_not_counted_and_claims_nothing_while_others_deliver(
    state_url: str,
) -> None:
    """A joining replica is counted in the shares once it can deliver: counted earlier, the others would
    hand it consumers it cannot read while its JVM starts (a rolling restart's lag). Alone, it claims at
    once. Meanwhile it is a registered replica (a lease of its is a replica's, not a foreign run's)."""
    configs = _configs(state_url)
    can_deliver = False
    held: set[str] = set()
    mine = Assignment(configs, lambda url: len(held), beat_s=1, deliverable=lambda: can_deliver)
    peer = ReplicaId(mine.me.host, os.getppid(), "9ee79ee7")  # a live process of this host
    starting_peer = ReplicaId(mine.me.host, os.getppid(), "57a27ed0")
    with open_store(state_url) as store:
        for c in CONSUMERS:
            store.ensure_consumer(c, "cat", f"db.{c}", Cursor.before_first_snapshot())
        registry = ReplicaRegistry(store)
        mine.start(lambda: None)
        try:
            ((registered, _),) = registry.replicas()  # registered as starting: a replica, counted by no share
            assert (registered.name, registered.starting) == (mine.owner, True)
            with mine.claim(configs[0]) as refused:
                assert refused is None  # alone: its first cycles plan while the JVM starts
            registry.heartbeat(starting_peer, starting_key(group_key(CONSUMERS)), 60)  # started together
            mine.beat()
            held.update(CONSUMERS[:3])
            with mine.claim(configs[3]) as refused:  # its share among the two starting: 3 of 5, not all
                assert refused is not None and "holds its share (3) of 5" in refused
            held.clear()
            registry.leave(starting_peer)
            registry.heartbeat(peer, group_key(CONSUMERS), 60)
            mine.beat()
            assert ReplicaRegistry(store).roster(peer, group_key(CONSUMERS), CONSUMERS).live[0].name == peer.name
            assert len(ReplicaRegistry(store).roster(peer, group_key(CONSUMERS), CONSUMERS).live) == 1
            with mine.claim(configs[0]) as refused:
                assert refused is not None and "Spark session is starting" in refused
            can_deliver = True
            mine.beat()
            assert {r.name: r.starting for r, _ in registry.replicas()} == {mine.owner: False, peer.name: False}
            assert mine.replicas_alive() == 2
            with mine.claim(configs[0]) as refused:
                assert refused is None
        finally:
            mine.stop()


def test_a_replica_whose_heartbeat_fails_says_so_until_a_beat_gets_through(tmp_path: Path) -> None:
    """A replica cut off from its store can neither renew nor take over there: `store_problem` (the
    /readyz reason) names the failed beat, even for a replica holding nothing, until a beat succeeds."""
    import uuid

    import psycopg

    if reason := pg_unavailable():
        pytest.skip(reason)
    app = f"icetail-beat-{uuid.uuid4().hex[:8]}"
    url = f"{new_state_url('postgresql', tmp_path)}&application_name={app}"
    mine = Assignment(_configs(url), lambda url: 0, beat_s=1)
    try:
        mine.beat(first=True)  # beats called here, one at a time (no beat thread to race them)
        assert mine.store_problem() is None
        with psycopg.connect(PG_URL, autocommit=True) as admin:  # the server drops the replica's session
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        mine.beat()
        problem = mine.store_problem()
        assert problem is not None and problem.startswith("replica heartbeat failed: "), problem
        mine.beat()  # reconnected
        assert mine.store_problem() is None
    finally:
        mine.stop()
        drop_state(url)
