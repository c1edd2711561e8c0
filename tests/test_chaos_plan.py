"""The chaos harness's plan (bench/chaos/plan.py): the `replicas` dimension and the bus sinks', and
the check of a bus sink's envelopes (bench/chaos/verify.py), without running a trial."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from bench.chaos.bus import BUS_SINKS, Envelope
from bench.chaos.places import EXACTLY_ONCE
from bench.chaos.plan import REPLICA_SINKS, SINKS, applicable, plan_trials
from bench.chaos.verify import compare, envelope_changes, envelope_order


def test_replicas_trials_need_postgresql_a_per_table_sink_and_a_pyiceberg_source() -> None:
    assert applicable("postgresql", "parquet", "replicas")
    assert not applicable("sqlite", "parquet", "replicas")  # replicas share a store across processes
    assert not applicable("postgresql", "iceberg", "replicas")
    assert not applicable("postgresql", "parquet", "replicas", kind="mor-v2")  # written by Java
    assert set(REPLICA_SINKS) == {"parquet", "pgmirror", "pghistory"}


def test_a_replicas_trial_draws_its_replica_count_from_its_own_seed() -> None:
    kinds, stores, sinks = ("append-delete",), ("sqlite", "postgresql"), ("parquet",)
    specs = plan_trials(40, 7, kinds, stores, sinks, ("sigkill", "replicas"), replicas=(2, 4))
    replicas = [s for s in specs if s.fault == "replicas"]
    assert replicas and {s.replicas for s in replicas} == {2, 4}
    assert all(s.store == "postgresql" and s.combo.endswith(f"replicasx{s.replicas}") for s in replicas)
    assert all(s.replicas == 0 for s in specs if s.fault != "replicas")
    # the trial's count of tables (its first draw from its seed, 2-4) is not tied to its count of replicas
    assert any(random.Random(s.seed).randint(2, 4) != s.replicas for s in replicas)
    # the replica counts change nothing in a plan without replicas trials (same combinations, same seeds)
    before = plan_trials(40, 7, kinds, stores, sinks, ("sigkill",))
    assert [(s.combo, s.seed) for s in plan_trials(40, 7, kinds, stores, sinks, ("sigkill",), replicas=(3,))] == [
        (s.combo, s.seed) for s in before
    ]
    assert plan_trials(40, 7, kinds, stores, sinks, ("sigkill", "replicas"), replicas=(2, 4)) == specs


def test_the_bus_sinks_get_the_faults_of_the_run_and_the_store_not_those_of_a_local_sink() -> None:
    for sink in BUS_SINKS:
        assert sink in SINKS and sink in EXACTLY_ONCE
        assert all(applicable("sqlite", sink, f) for f in ("sigkill", "sigterm", "keyed-kill", "reset-to"))
        assert applicable("postgresql", sink, "pg-cut") and not applicable("sqlite", sink, "pg-cut")
        for fault in ("disk-full-sink", "serve-disk-full-sink", "reset-sink", "sink-writer", "s3-503", "replicas"):
            assert not applicable("postgresql", sink, fault), (sink, fault)


def _envelope(op: str, snap: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Envelope:
    source = {"connector": "icetail", "snapshot_id": snap}
    return Envelope({"op": op, "before": before, "after": after, "source": source}, str(snap))


def test_the_envelopes_read_back_are_checked_as_changes_a_lost_or_repeated_one_seen() -> None:
    columns = ["id", "name"]
    a, b, c = {"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 2, "name": "b2"}
    stream = [_envelope("c", 10, None, a), _envelope("r", 10, None, b), _envelope("u", 11, b, c)]
    stream.append(_envelope("d", 12, a, None))
    got, bad = envelope_changes(stream, columns)
    assert bad == 0
    expected = Counter(
        {("I", 10, (1, "a")): 1, ("I", 10, (2, "b")): 1, ("D", 11, (2, "b")): 1, ("I", 11, (2, "b2")): 1}
    )
    expected[("D", 12, (1, "a"))] = 1
    assert got == expected and compare(expected, got).ok(exactly_once=True)
    twice, _ = envelope_changes([*stream, stream[2]], columns)  # an update delivered again
    verdict = compare(expected, twice)
    assert (verdict.lost, verdict.duplicated) == (0, 2) and not verdict.ok(exactly_once=True)
    missing, _ = envelope_changes(stream[1:], columns)
    assert compare(expected, missing).lost == 1
    # a message whose metadata names another snapshot than its envelope, or no envelope at all: torn
    wrong = Envelope(_envelope("c", 10, None, a).envelope, "11")
    _, bad = envelope_changes([wrong, Envelope(None, "10"), _envelope("x", 10, None, a)], columns)
    assert bad == 3


def test_each_keys_changes_are_checked_in_the_order_of_their_snapshots() -> None:
    """The same changes (so the same verdict by content) in another order on the stream: a key's change of
    a later snapshot before one of an earlier snapshot is out of order; other keys' interleaving is not."""
    a, a2, b, b2 = {"id": 1, "name": "a"}, {"id": 1, "name": "a2"}, {"id": 2, "name": "b"}, {"id": 2, "name": "b2"}
    history = [10, 11, 12]  # the snapshots' order on the table's history (ids need not grow)
    stream = [_envelope("c", 10, None, a), _envelope("c", 11, None, b), _envelope("u", 12, a, a2)]
    stream.append(_envelope("u", 11, b, b2))  # key 2 again in snapshot 11, after key 1's snapshot 12: fine
    assert envelope_order(stream, history) == (0, ())
    swapped = [stream[2], stream[0], stream[1], stream[3]]  # key 1's update before its insert
    bad, examples = envelope_order(swapped, history)
    assert bad == 1 and "key (None, None, 1), snapshot 10 after 12" in examples[0]
    assert envelope_order(swapped, history, replayed=frozenset({10})) == (0, ())  # a rewind delivers 10 again
    assert envelope_order(stream, [12, 11, 10])[0] == 1  # key 1: the history's order, not the ids', is the rule
