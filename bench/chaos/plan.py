"""What a trial is: one table kind x store x sink x fault, and a seed for everything random in it."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

KINDS = ("append-delete", "cow-overwrite", "schema-evolution", "mor-v2", "dv-v3", "eq-deletes", "wap")
JAVA_KINDS = ("mor-v2", "dv-v3", "eq-deletes", "wap")  # written by Java Iceberg (bench/chaos/java_source.py)
STORES = ("sqlite", "postgresql")
SINKS = (
    "parquet",
    "jsonl",
    "iceberg",
    "pgmirror",
    "parquet+s3",
    "iceberg+s3",
    "icemirror",  # iceberg://...?mode=mirror
    "icehistory",  # iceberg://...?mode=history
    "pghistory",  # postgresql://...&mode=history
    "icemirror+s3",
    "nats",  # nats://...?stream=...: a JetStream stream of Debezium envelopes
    "redis",  # redis-stream://...: a Redis stream, one envelope per entry
    "rabbitmq",  # rabbitmq-stream://...: a RabbitMQ stream, one envelope per message
)
FAULTS = (
    "sigkill",
    "sigterm",
    "pg-cut",
    "s3-stop",
    "s3-slow",
    "s3-503",
    "catalog-lock",
    "disk-full-sink",
    "disk-full-state",
    "reset-sink",
    "reset-to",
    "verify-strict",
    "keyed-kill",
    "keyed-term",
    "keyed-repair",
    "sink-writer",
    "serve-pg-cut",
    "serve-s3-stop",
    "serve-s3-slow",
    "serve-s3-503",
    "serve-catalog-lock",
    "serve-disk-full-sink",
    "serve-disk-full-state",
    "replicas",
)
SERVE_PREFIX = "serve-"  # `icetail serve` under a transient fault, recovering without a restart (serve_trial.py)
DISK_FAULTS = ("disk-full-sink", "disk-full-state", "serve-disk-full-sink", "serve-disk-full-state")
LOCAL_SINKS = ("parquet", "jsonl", "iceberg", "icemirror", "icehistory")  # a small local filesystem can be under them
PG_SINKS = ("pgmirror", "pghistory")
HISTORY_SINKS = ("pghistory", "icehistory")
ICEBERG_TARGETS = ("iceberg", "iceberg+s3", "icemirror", "icehistory", "icemirror+s3")  # `sink-writer` commits there
S3_FAULTS = ("s3-stop", "s3-slow", "s3-503")
KEYED_FAULTS = ("keyed-kill", "keyed-term")  # a signal at an observed moment (bench/chaos/moments.py)
# `replicas`: 2-4 `icetail serve` replicas of one configuration (several tables, a PostgreSQL store),
# 1-3 faults among them (bench/chaos/replicas_trial.py); sinks one per table, each a folder or a schema
REPLICAS = (2, 3, 4)
REPLICA_SINKS = ("parquet", "pgmirror", "pghistory")
# the bus sinks (nats, redis, rabbitmq; bench/chaos/bus.py): a stream on a server, one per trial, so
# none of the sink-side faults above (no local folder to fill, no second sink of the kind beside it
# for reset-sink, no S3, no Iceberg target for a second writer); the run's and the store's faults,
# the keyed moments and reset --to apply


@dataclass(frozen=True)
class TrialSpec:
    index: int
    kind: str
    store: str
    sink: str
    fault: str
    seed: int
    replicas: int = 0  # `replicas`: how many `icetail serve` processes start

    @property
    def combo(self) -> str:
        fault = f"{self.fault}x{self.replicas}" if self.replicas else self.fault
        return f"{self.kind} {self.store} {self.sink} {fault}"

    @property
    def serve(self) -> bool:
        return self.fault.startswith(SERVE_PREFIX)

    @property
    def base_fault(self) -> str:
        """The fault as injected: `serve-pg-cut` is a `pg-cut` under `icetail serve`."""
        return self.fault.removeprefix(SERVE_PREFIX)

    @property
    def uses_postgresql(self) -> bool:
        return self.store == "postgresql" or self.sink in PG_SINKS

    @property
    def uses_s3(self) -> bool:
        return self.sink.endswith("+s3")


def applicable(store: str, sink: str, fault: str, kind: str = "append-delete") -> bool:
    """A PostgreSQL cut needs something that talks to PostgreSQL, an S3 fault an S3 sink; a lying
    summary (`verify-strict`) is written by the pyiceberg writer only, and only its tables are
    expired by the harness (`keyed-repair`). A second writer (`sink-writer`) needs an Iceberg
    target; `reset --to` replays snapshots on purpose, which a history records as new versions
    (by design: the check of a history wants each version once)."""
    if fault in ("verify-strict", "keyed-repair"):
        return kind not in JAVA_KINDS
    if fault == "replicas":  # replicas share a store on PostgreSQL; the source tables are pyiceberg's
        return store == "postgresql" and sink in REPLICA_SINKS and kind not in JAVA_KINDS
    fault = fault.removeprefix(SERVE_PREFIX)
    if fault == "pg-cut":
        return store == "postgresql" or sink in PG_SINKS
    if fault in S3_FAULTS:
        return sink.endswith("+s3")
    if fault == "disk-full-sink":
        return sink in LOCAL_SINKS
    if fault == "disk-full-state":
        return store == "sqlite"
    if fault == "sink-writer":
        return sink in ICEBERG_TARGETS
    if fault == "reset-to":
        return sink not in HISTORY_SINKS
    if fault == "reset-sink":
        return sink in ("parquet", "jsonl")  # a second sink of the same kind beside the first
    return True


def plan_trials(
    trials: int,
    seed: int,
    kinds: tuple[str, ...],
    stores: tuple[str, ...],
    sinks: tuple[str, ...],
    faults: tuple[str, ...],
    weights: dict[str, int] | None = None,
    replicas: tuple[int, ...] = REPLICAS,
) -> list[TrialSpec]:
    """Seeded choices; the combinations are visited round-robin in a shuffled order so that a short
    run covers as many as it can instead of repeating a few. `weights` (a kind, store, sink or
    fault -> N) puts each combination with that name N times in the round (a larger share). A
    `replicas` trial's count of replicas is drawn from `replicas` with its own seed + 35 (not the
    seed itself: the trial draws its count of tables first from that, 2-4, which would then always
    equal the count of replicas, as in R53's batches; the other trials' seeds stay as they were)."""
    rng = random.Random(seed)
    weights = weights or {}
    combos = [
        (k, st, si, f) for k in kinds for st in stores for si in sinks for f in faults if applicable(st, si, f, k)
    ]
    if not combos:
        raise ValueError("no combination of the given kinds, stores, sinks and faults is applicable")
    combos = [c for c in combos for _ in range(max([1, *(weights.get(name, 1) for name in c)]))]
    rng.shuffle(combos)
    specs = [TrialSpec(i, *combos[i % len(combos)], seed=rng.randrange(2**31)) for i in range(trials)]
    return [
        dataclasses.replace(s, replicas=random.Random(s.seed + 35).choice(replicas)) if s.fault == "replicas" else s
        for s in specs
    ]
