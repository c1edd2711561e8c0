"""Prometheus metrics for icetail, built on an explicit registry (never the global default).

`Metrics.create()` builds every metric on a `CollectorRegistry` it is given (or a fresh one),
so tests and several services in one process never collide. Per-consumer series carry the
labels `table` and `consumer`; `icetail_rows_emitted_total` adds `change_type` and
`icetail_failures_total` adds `stage`. Label values come from closed sets (the four Iceberg
change types, the five failure stages) so cardinality stays bounded.

Semantics the alert rules in deploy/prometheus/alerts.yml rely on:

* `icetail_last_success_timestamp_seconds` is the end of the last successful poll cycle,
  including a cycle that found nothing new (`record_success`), not only a delivered batch;
  a quiet table must not look stuck.
* `icetail_consecutive_failures` counts failures since the last success and drops to 0 on one.
* `icetail_lag_seconds` is the age of the oldest committed-but-undelivered snapshot, 0 when
  caught up (`lineage.age_seconds()` computes it from commit timestamps).
* `icetail_lag_snapshots` and `icetail_lag_seconds` are NaN while the lag is unknown: from
  start until the consumer's first look at the table, and while its cursor is lost (expired
  or rolled back). NaN, not 0 (which reads as "caught up") and not absent (which hides the
  consumer), as Prometheus' exporters report a value they cannot measure; a comparison with
  NaN is false, so lag alerts stay quiet and `IcetailLagUnknown` fires instead.
* `icetail_cursor_lost{condition}` is 1 for the condition the consumer's cursor is in
  (`cursor_expired`, `chain_expired`, `not_descendant`; see docs/delivery.md) and 0 for the
  others, so an alert can tell expiry from a rollback; `icetail_collapsed_batches_total` counts
  repair batches (a direct diff: history between two snapshots collapsed into one commit).
* `icetail_snapshot_checks_total{rule}` counts snapshots checked against a rule their summary
  proves (docs/semantics.md, "Every snapshot checks itself"), and
  `icetail_snapshot_check_mismatches_total{rule}` those whose changes disagreed; both stay 0
  under `--verify off`, so a zero mismatch count next to a growing check count means checked.
* `icetail_sink_duplicate_keys_total` counts inserts of a key a mirror's target already held (the
  PostgreSQL and Iceberg mirrors and histories; docs/sinks.md, "Duplicate keys in the source"):
  the source does not keep its key unique, last writer wins. Any increase deserves a look.
* Replicas (docs/delivery.md, "Replicas"): `icetail_replicas_alive` is the number of live `serve`
  replicas of this configuration in the last roster this replica read (itself included; 1 alone).
  `icetail_consumer_owned` is 1 on the replica that holds the consumer open (its lease) and 0 on
  every other replica of the configuration, which exports the same consumers: "owned by nobody"
  is `max by (table, consumer)` equal to 0, never an absent series (IcetailConsumerUnowned).
  `icetail_handovers_total{cause}` counts a consumer leaving or reaching this replica: `joined`
  (released above the share, for a replica that joined), `left` (released on SIGTERM), `expired`
  (claimed after another replica's lease expired), `stopped` (released when stopped).
* `process_*` (resident memory, CPU seconds, start time, open file descriptors) describe the
  service's own process, on the same registry.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector

from icetail.kernel.model import ChangeType
from icetail.monitor.planning.summary_rules import RULES
from icetail.monitor.service.engine_metrics import EngineMetrics

__all__ = [
    "BATCH_DURATION_BUCKETS",
    "HANDOVER_CAUSES",
    "PLANNING_DURATION_BUCKETS",
    "BatchReport",
    "FailureStage",
    "Metrics",
    "build_versions",
]

CONSUMER_LABELS = ("table", "consumer")
HANDOVER_CAUSES = ("joined", "left", "expired", "stopped")
CURSOR_CONDITIONS = ("cursor_expired", "chain_expired", "not_descendant")  # lineage.CursorCondition values

# A batch runs from well under a second (one small commit) to an hour (a backfill).
BATCH_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# Planning reads manifests only: milliseconds for a small table, minutes for a huge range.
PLANNING_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_BUILD_PACKAGES = ("icetail", "pyspark", "pyiceberg", "pyarrow")


class FailureStage(str, Enum):
    """Where a failed cycle broke; the `stage` label of `icetail_failures_total`."""

    PLAN = "plan"
    READ = "read"
    SINK = "sink"
    STATE = "state"
    CATALOG = "catalog"


def _change_type_label(key: ChangeType | str) -> str:
    value = key.value if isinstance(key, ChangeType) else str(key)
    try:
        return ChangeType(value).value
    except ValueError:
        allowed = ", ".join(c.value for c in ChangeType)
        raise ValueError(f"unknown change type {key!r}; expected one of {allowed}") from None


def _rule_label(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"unknown summary rule {rule!r}; expected one of {', '.join(RULES)}")
    return rule


def _stage_label(stage: FailureStage | str) -> str:
    try:
        return FailureStage(stage).value
    except ValueError:
        allowed = ", ".join(s.value for s in FailureStage)
        raise ValueError(f"unknown failure stage {stage!r}; expected one of {allowed}") from None


@dataclass(frozen=True)
class BatchReport:
    """What one delivered batch did: snapshots (from_snapshot_exclusive, to_snapshot_inclusive]."""

    table: str
    consumer: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    snapshots: int
    rows_by_change_type: Mapping[ChangeType | str, int] = field(default_factory=dict)
    data_files: int = 0
    bytes_read: int = 0
    row_groups: int = 0
    delete_files: int = 0
    deleted_rows: int = 0
    splits: int = 0
    chunks: int = 0
    planning_seconds: float = 0.0
    batch_seconds: float = 0.0
    collapsed: bool = False  # a repair batch (direct diff)
    sink_duplicate_keys: int = 0  # inserts of a key a mirror's target held already
    engine: str = "spark"  # where the batch was read: local (this process) or spark

    def __post_init__(self) -> None:
        if not self.table or not self.consumer:
            raise ValueError("BatchReport needs a table and a consumer")
        # normalized copy: ChangeType members become their values, unknown keys are rejected
        rows = {_change_type_label(k): int(v) for k, v in self.rows_by_change_type.items()}
        object.__setattr__(self, "rows_by_change_type", rows)
        counts = {
            "snapshots": self.snapshots,
            "data_files": self.data_files,
            "bytes_read": self.bytes_read,
            "row_groups": self.row_groups,
            "delete_files": self.delete_files,
            "deleted_rows": self.deleted_rows,
            "splits": self.splits,
            "chunks": self.chunks,
            "sink_duplicate_keys": self.sink_duplicate_keys,
            **{f"rows[{k}]": v for k, v in rows.items()},
        }
        negative = sorted(name for name, value in counts.items() if value < 0)
        if negative:
            raise ValueError(f"BatchReport counts must be >= 0: {', '.join(negative)}")
        if self.planning_seconds < 0 or self.batch_seconds < 0:
            raise ValueError("BatchReport durations must be >= 0")

    @property
    def rows(self) -> int:
        return sum(self.rows_by_change_type.values())


def _manifest_cache_weight() -> float:
    # imported on first scrape: the planning modules pull in pyiceberg, which `status` does not need
    from icetail.monitor.planning.manifests import shared_manifest_cache_weight

    return float(shared_manifest_cache_weight())


def build_versions() -> dict[str, str]:
    """Installed versions of icetail and its engines, "unknown" for a missing distribution."""
    versions: dict[str, str] = {}
    for name in _BUILD_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "unknown"
    versions["python"] = platform.python_version()
    return versions


@dataclass(frozen=True)
class Metrics:
    """Every icetail metric, registered on `registry`. Build with `Metrics.create()`."""

    registry: CollectorRegistry
    lag_snapshots: Gauge
    lag_seconds: Gauge
    cursor_commit_timestamp_seconds: Gauge
    snapshots_discovered: Counter
    snapshots_processed: Counter
    rows_emitted: Counter
    data_files_read: Counter
    bytes_read: Counter
    row_groups_read: Counter
    delete_files_applied: Counter
    deleted_rows_applied: Counter
    splits_committed: Counter
    chunks_committed: Counter
    batch_duration: Histogram
    planning_duration: Histogram
    failures: Counter
    inflight_chunks: Gauge
    last_success_timestamp_seconds: Gauge
    consecutive_failures: Gauge
    build_info: Info
    cursor_lost: Gauge
    collapsed_batches: Counter
    snapshot_checks: Counter
    snapshot_check_mismatches: Counter
    consumer_stopped: Gauge
    sink_duplicate_keys: Counter
    manifest_cache_entries: Gauge
    replicas_alive: Gauge
    consumer_owned: Gauge
    handovers: Counter
    engines: EngineMetrics  # batches by engine, the Spark session's life (engine_metrics.py)

    @classmethod
    def create(
        cls,
        registry: CollectorRegistry | None = None,
        *,
        versions: Mapping[str, str] | None = None,
    ) -> Metrics:
        """Register all metrics on `registry` (a fresh `CollectorRegistry` when None).

        `versions` overrides the build-info labels (default: `build_versions()`).
        Registering twice on the same registry raises ValueError (duplicated timeseries).
        """
        reg = CollectorRegistry(auto_describe=True) if registry is None else registry
        labels = CONSUMER_LABELS

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=reg)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, (*labels, *extra), registry=reg)

        metrics = cls(
            registry=reg,
            lag_snapshots=gauge("icetail_lag_snapshots", "Snapshots committed to the table but not yet delivered."),
            lag_seconds=gauge(
                "icetail_lag_seconds",
                "Age of the oldest committed-but-undelivered snapshot in seconds; 0 when caught up.",
            ),
            cursor_commit_timestamp_seconds=gauge(
                "icetail_cursor_commit_timestamp_seconds",
                "Commit timestamp of the last delivered snapshot (the cursor), Unix seconds.",
            ),
            snapshots_discovered=counter(
                "icetail_snapshots_discovered",
                "Snapshots found after the cursor by the planner.",
            ),
            snapshots_processed=counter("icetail_snapshots_processed", "Snapshots whose changes were delivered."),
            rows_emitted=counter(
                "icetail_rows_emitted",
                "Change rows delivered to the sink, by Iceberg change type.",
                ("change_type",),
            ),
            data_files_read=counter("icetail_data_files_read", "Data files read."),
            bytes_read=counter("icetail_bytes_read", "Bytes of data files read."),
            row_groups_read=counter("icetail_row_groups_read", "Parquet row groups read."),
            delete_files_applied=counter(
                "icetail_delete_files_applied", "Delete files (position, DV, equality) applied."
            ),
            deleted_rows_applied=counter("icetail_deleted_rows_applied", "Rows removed by applying delete files."),
            splits_committed=counter("icetail_splits_committed", "Change splits committed to the checkpoint store."),
            chunks_committed=counter("icetail_chunks_committed", "Sink chunks committed to the checkpoint store."),
            batch_duration=Histogram(
                "icetail_batch_duration_seconds",
                "Wall time of one delivered batch, planning included.",
                labels,
                registry=reg,
                buckets=BATCH_DURATION_BUCKETS,
            ),
            planning_duration=Histogram(
                "icetail_planning_duration_seconds",
                "Wall time spent planning one batch (reading manifests).",
                labels,
                registry=reg,
                buckets=PLANNING_DURATION_BUCKETS,
            ),
            failures=counter(
                "icetail_failures",
                "Failed cycles by stage (plan, read, sink, state, catalog).",
                ("stage",),
            ),
            inflight_chunks=gauge("icetail_inflight_chunks", "Chunks written to the sink but not yet committed."),
            last_success_timestamp_seconds=gauge(
                "icetail_last_success_timestamp_seconds",
                "End of the last successful poll cycle (a batch or a poll that found nothing), Unix seconds.",
            ),
            consecutive_failures=gauge(
                "icetail_consecutive_failures",
                "Failed cycles since the last successful one.",
            ),
            build_info=Info(
                "icetail_build",
                "Versions of icetail, pyspark, pyiceberg, pyarrow and python.",
                registry=reg,
            ),
            cursor_lost=Gauge(
                "icetail_cursor_lost",
                "1 when the cursor cannot be continued, for its condition "
                "(cursor_expired, chain_expired, not_descendant); 0 otherwise.",
                (*labels, "condition"),
                registry=reg,
            ),
            collapsed_batches=counter(
                "icetail_collapsed_batches",
                "Repair batches delivered by a direct diff (the history between two snapshots collapsed).",
            ),
            snapshot_checks=counter(
                "icetail_snapshot_checks",
                "Snapshots checked against a rule their summary proves (--verify; docs/semantics.md), by rule.",
                ("rule",),
            ),
            snapshot_check_mismatches=counter(
                "icetail_snapshot_check_mismatches",
                "Snapshots whose changes disagree with a rule of their summary, by rule.",
                ("rule",),
            ),
            consumer_stopped=gauge(
                "icetail_consumer_stopped",
                "1 while a consumer of a several-table serve is stopped after --max-failures consecutive "
                "failures (retried every 5 minutes; the others keep delivering); 0 otherwise.",
            ),
            sink_duplicate_keys=counter(
                "icetail_sink_duplicate_keys",
                "Inserts of a key a mirror's target already held (the source holds a key twice; last writer wins).",
            ),
            manifest_cache_entries=Gauge(
                "icetail_manifest_cache_entries",
                "Decoded manifest entries and manifest-list records held by the process's shared manifest "
                "cache (serve), bounded by manifest_cache_entries; ~0.5 KB of driver memory each.",
                registry=reg,
            ),
            replicas_alive=Gauge(
                "icetail_replicas_alive",
                "Live serve replicas of this configuration in the checkpoint store, this one included.",
                registry=reg,
            ),
            consumer_owned=gauge(
                "icetail_consumer_owned",
                "1 on the replica that holds the consumer (its lease), 0 on the other replicas.",
            ),
            handovers=counter(
                "icetail_handovers",
                "Consumers handed over between replicas, by cause (joined, left, expired, stopped).",
                ("cause",),
            ),
            engines=EngineMetrics.create(reg, labels),
        )
        metrics.replicas_alive.set(1)
        metrics.manifest_cache_entries.set_function(_manifest_cache_weight)
        metrics.build_info.info(dict(build_versions() if versions is None else versions))
        ProcessCollector(registry=reg)  # process_* series; reads /proc, so Linux only (empty elsewhere)
        return metrics

    def register_consumer(self, table: str, consumer: str) -> None:
        """Create a consumer's series at zero so rates and alerts see it before its first batch.

        `icetail_last_success_timestamp_seconds` is left unset until a real success.
        """
        for c in (
            self.snapshots_discovered,
            self.snapshots_processed,
            self.data_files_read,
            self.bytes_read,
            self.row_groups_read,
            self.delete_files_applied,
            self.deleted_rows_applied,
            self.splits_committed,
            self.chunks_committed,
            self.collapsed_batches,
            self.sink_duplicate_keys,
        ):
            c.labels(table, consumer)
        for change_type in ChangeType:
            self.rows_emitted.labels(table, consumer, change_type.value)
        for stage in FailureStage:
            self.failures.labels(table, consumer, stage.value)
        for cause in HANDOVER_CAUSES:
            self.handovers.labels(table, consumer, cause)
        self.engines.register_consumer(table, consumer)
        for rule in RULES:
            self.snapshot_checks.labels(table, consumer, rule)
            self.snapshot_check_mismatches.labels(table, consumer, rule)
        for g in (self.inflight_chunks, self.consecutive_failures, self.consumer_stopped, self.consumer_owned):
            g.labels(table, consumer).set(0)
        self.set_lag_unknown(table, consumer)
        self.set_cursor_condition(table, consumer, None)
        self.batch_duration.labels(table, consumer)
        self.planning_duration.labels(table, consumer)

    def record_discovered(self, table: str, consumer: str, snapshots: int) -> None:
        """The planner found `snapshots` new snapshots after the cursor."""
        if snapshots < 0:
            raise ValueError("snapshots must be >= 0")
        self.snapshots_discovered.labels(table, consumer).inc(snapshots)

    def record_batch(self, report: BatchReport, *, now: float | None = None) -> None:
        """Count a delivered batch and mark the consumer's cycle successful at `now`."""
        t, c = report.table, report.consumer
        self.snapshots_processed.labels(t, c).inc(report.snapshots)
        for change_type, rows in report.rows_by_change_type.items():
            self.rows_emitted.labels(t, c, change_type).inc(rows)
        self.data_files_read.labels(t, c).inc(report.data_files)
        self.bytes_read.labels(t, c).inc(report.bytes_read)
        self.row_groups_read.labels(t, c).inc(report.row_groups)
        self.delete_files_applied.labels(t, c).inc(report.delete_files)
        self.deleted_rows_applied.labels(t, c).inc(report.deleted_rows)
        self.splits_committed.labels(t, c).inc(report.splits)
        self.chunks_committed.labels(t, c).inc(report.chunks)
        self.sink_duplicate_keys.labels(t, c).inc(report.sink_duplicate_keys)
        self.engines.record_batch(t, c, report.engine)
        if report.collapsed and report.snapshots:
            self.collapsed_batches.labels(t, c).inc()
        self.planning_duration.labels(t, c).observe(report.planning_seconds)
        self.batch_duration.labels(t, c).observe(report.batch_seconds)
        self.record_success(t, c, now=now)

    def record_snapshot_check(self, table: str, consumer: str, rules: Iterable[str], failed: Iterable[str]) -> None:
        """One snapshot checked: each rule its summary proved, and those its changes failed."""
        for rule in rules:
            self.snapshot_checks.labels(table, consumer, _rule_label(rule)).inc()
        for rule in failed:
            self.snapshot_check_mismatches.labels(table, consumer, _rule_label(rule)).inc()

    def record_success(self, table: str, consumer: str, *, now: float | None = None) -> None:
        """A poll cycle succeeded (with or without new snapshots)."""
        self.last_success_timestamp_seconds.labels(table, consumer).set(time.time() if now is None else now)
        self.consecutive_failures.labels(table, consumer).set(0)

    def set_stopped(self, table: str, consumer: str, stopped: bool) -> None:
        """A consumer of a several-table serve stopped after its failures (1), or delivering again (0)."""
        self.consumer_stopped.labels(table, consumer).set(1 if stopped else 0)

    def record_handover(self, table: str, consumer: str, cause: str) -> None:
        """The consumer left this replica (joined, left, stopped) or reached it from an expired lease."""
        if cause not in HANDOVER_CAUSES:
            raise ValueError(f"unknown hand-over cause {cause!r}; expected one of {', '.join(HANDOVER_CAUSES)}")
        self.handovers.labels(table, consumer, cause).inc()

    def record_failure(self, table: str, consumer: str, stage: FailureStage | str) -> None:
        """A cycle failed in `stage` (plan, read, sink, state or catalog)."""
        self.failures.labels(table, consumer, _stage_label(stage)).inc()
        self.consecutive_failures.labels(table, consumer).inc()

    def set_lag(
        self,
        table: str,
        consumer: str,
        *,
        snapshots: int,
        seconds: float,
        cursor_commit_timestamp_seconds: float | None = None,
    ) -> None:
        """Lag after a poll: undelivered snapshots, age of the oldest one, the cursor's commit time."""
        if snapshots < 0 or seconds < 0:
            raise ValueError("lag must be >= 0")
        self.lag_snapshots.labels(table, consumer).set(snapshots)
        self.lag_seconds.labels(table, consumer).set(seconds)
        if cursor_commit_timestamp_seconds is not None:
            self.cursor_commit_timestamp_seconds.labels(table, consumer).set(cursor_commit_timestamp_seconds)

    def set_lag_unknown(self, table: str, consumer: str) -> None:
        """The lag cannot be measured (not looked yet, or the cursor is lost): NaN, never a reassuring 0."""
        self.lag_snapshots.labels(table, consumer).set(math.nan)
        self.lag_seconds.labels(table, consumer).set(math.nan)

    def set_cursor_condition(self, table: str, consumer: str, condition: str | None) -> None:
        """Which lost-cursor condition holds now (None: the cursor can be continued)."""
        if condition is not None and condition not in CURSOR_CONDITIONS:
            raise ValueError(f"unknown cursor condition {condition!r}; expected one of {', '.join(CURSOR_CONDITIONS)}")
        for known in CURSOR_CONDITIONS:
            self.cursor_lost.labels(table, consumer, known).set(1 if known == condition else 0)

    def set_inflight_chunks(self, table: str, consumer: str, chunks: int) -> None:
        self.inflight_chunks.labels(table, consumer).set(chunks)
