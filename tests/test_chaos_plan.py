"""The chaos harness's plan (bench/chaos/plan.py): the `replicas` dimension, without running a trial."""

from __future__ import annotations

import random

from bench.chaos.plan import REPLICA_SINKS, applicable, plan_trials


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
