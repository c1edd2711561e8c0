"""`icetail serve`: APScheduler polls each table; metrics, health and graceful shutdown.

One job per consumer, never overlapping itself (max_instances=1) and coalescing missed ticks,
so a slow batch delays the next tick instead of starting a second. All jobs share one
SparkSession. A failing cycle is retried with exponential backoff; after `max_failures`
consecutive failures the only consumer ends the process (exit 1), one of several is parked while
the others keep delivering (failures.py says how each failure is answered: a full local disk is
waited out, a dead Spark JVM ends the process at once). Lag is measured around each cycle
(lag.py); the replicas of one configuration share its consumers (replica_jobs.py). SIGTERM/SIGINT
stop new ticks, let the chunk in progress commit, and exit 0.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from dataclasses import fields
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from icetail.kernel.errors import ConfigError, IcetailError, StateBusyError, TerminalError, message_line
from icetail.monitor.engine.batch_engine import always_on_spark
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline
from icetail.monitor.service.assignment import Assignment, beat_seconds
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.failures import Failures
from icetail.monitor.service.followed import CatalogLister, FollowedTables, Lister
from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.lag import update_lag
from icetail.monitor.service.metrics import BatchReport, Metrics
from icetail.monitor.service.replica_jobs import JobState, ReplicaJobs
from icetail.monitor.service.shared_stores import SharedStores
from icetail.reader.changes.checks import SnapshotCheck
from icetail.reader.spark.on_demand import SparkOnDemand
from icetail.reader.spark.session import scheduler_pool

log = logging.getLogger("icetail.serve")

FOLLOW_PATTERNS_JOB = "icetail-follow-patterns"  # the job that lists the patterns' namespaces each interval


def build_scheduler(threads: int) -> BackgroundScheduler:
    """The jobs' scheduler: `threads` cycles may run at once (APScheduler's default is 10, so with
    more tables due together the rest waited for a thread, not for Spark: R32). A job never
    overlaps itself and coalesces missed ticks."""
    return BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(threads)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
    )


def spark_scheduler_conf(mode: str | None, tables: int) -> dict[str, str] | None:
    """`spark.scheduler.mode` for the session `serve` builds: FAIR by default with several tables
    (each table's jobs go to a pool of its own, `_tick`), Spark's default otherwise."""
    chosen = mode or ("fair" if tables > 1 else None)
    return None if chosen is None else {"spark.scheduler.mode": chosen.upper()}


def batch_report(config: PipelineConfig, outcome: BatchOutcome) -> BatchReport:
    """The metrics' view of a batch: every field of BatchReport but the table and consumer is the
    outcome's field of that name; an interrupted batch counts its chunks but no snapshots or splits yet."""
    same = {f.name: getattr(outcome, f.name) for f in fields(BatchReport) if f.name not in ("table", "consumer")}
    if not outcome.completed:
        same.update(snapshots=0, splits=0)
    return BatchReport(table=config.table, consumer=config.consumer_id, **same)


class Service(ReplicaJobs):
    """Runs every configured pipeline on a schedule until stopped."""

    def __init__(
        self,
        config: ServiceConfig,
        *,
        registry: CollectorRegistry | None = None,
        spark: Any = None,
        lister: Lister | None = None,
    ) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.metrics = Metrics.create(self.registry)
        self.server = MonitorServer(self.registry, self.readiness)
        self._spark = spark  # a session given (every batch on Spark), else run()'s SparkOnDemand
        self._own_session: SparkOnDemand | None = None  # icetail's own, started by the first batch on Spark
        self._eager_spark = False  # every table reads on Spark: started at once, ready once warm
        self._stop = threading.Event()
        self._fatal: str | None = None
        self._setup_error: IcetailError | None = None
        self._jobs: dict[str, JobState] = {}
        self._pipelines: dict[str, PipelineConfig] = {}  # every consumer followed, by id: grows as patterns find tables
        self._failures = Failures(config, self.metrics, self._jobs)
        self._stores = SharedStores()
        self._scheduler = build_scheduler(config.scheduler_threads)
        self._followed = FollowedTables(config.pipelines, config.patterns, lister or CatalogLister())
        ttl = min(p.lease_ttl_seconds for p in config.templates)
        beat_s = beat_seconds(config.interval_seconds, ttl)
        self.assignment = Assignment(
            config.pipelines, self._held, beat_s=beat_s, patterns=config.patterns, deliverable=self._can_deliver
        )
        self._watch_replicas()
        for p in config.pipelines:
            self._follow(p)

    # health ----------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """Ready when every consumer has finished a successful cycle and its last cycle succeeded.

        Not ready before the first successful cycle of each consumer, and from a consumer's
        first failed cycle until its next successful one (a retrying consumer makes no progress).
        The reason names every consumer that is not ready, stopped ones first. One replica of several
        answers for the consumers it holds or is claiming only (a replica holding nothing because the
        others hold everything is ready), and is not ready while it holds more than its fair share,
        while its last heartbeat in a store failed, or while its Spark session starts (a rolling update
        must not stop an old replica for a new one that cannot deliver yet).
        """
        stopped, failing, starting = [], [], []
        if not self._can_deliver():
            starting.append("the Spark session is starting")
        for consumer, job in list(self._jobs.items()):
            failures = f"{job.consecutive_failures} consecutive failures: {job.last_error}"
            if job.elsewhere:
                continue  # another replica's to deliver
            if job.stopped:
                stopped.append(f"{consumer}: stopped after {failures}")
            elif job.consecutive_failures > 0:
                failing.append(f"{consumer}: {failures}")
            elif job.waits > 0:
                failing.append(f"{consumer}: waiting, {job.waits} cycle(s) so far: {job.last_error}")
            elif not job.last_ok:
                starting.append(f"{consumer}: first cycle not finished")
        problem = self.assignment.store_problem()  # cut off from the store: not ready, even holding nothing
        if problem is not None:
            failing.append(problem)
        reasons = stopped + failing + starting
        over = self.assignment.over_share()  # a replica holding less than its share, or nothing, is ready
        if over is not None:
            reasons.append(over)
        return (False, "; ".join(reasons)) if reasons else (True, "ok")

    # lifecycle -------------------------------------------------------------------------
    def run(self, *, install_signal_handlers: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or a consumer exhausts its retries (exit 1)."""
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        if self.config.patterns:  # a namespace that does not exist, a catalog not configured: exit 2 now
            self._follow_patterns(at_start=True)
        if self._spark is None:
            # started by the first batch that reads on Spark (none, while every batch is small), stopped
            # after spark_idle_stop with none. Several tables share the cores fairly: each table's jobs go
            # to a pool of its own (`_tick`)
            tables = max(2, len(self._jobs)) if self.config.patterns else len(self._jobs)  # a pattern: several
            conf = spark_scheduler_conf(self.config.spark_scheduler_mode, tables)
            self._spark = self._own_session = SparkOnDemand(
                "icetail-serve",
                conf,
                idle_stop_seconds=self.config.spark_idle_stop_seconds,
                on_change=self.metrics.engines.spark_session_changed,
            )
            self._eager_spark = all(always_on_spark(p.engine, p.local_max_bytes) for p in self.config.templates)
        self.assignment.start(self._keep_leases)  # a store that refuses this replica: exit 2, before anything starts
        host, wanted = self.config.metrics_host, self.config.metrics_port
        try:
            _, port = self.server.start(host, wanted)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {host}:{wanted} ({exc.strerror or exc}); pick another --metrics-port "
                "(ICETAIL_METRICS_PORT) or stop the process that holds it"
            ) from exc
        log.info(
            "serving metrics",
            extra={"port": port, "consumers": list(self._jobs), "scheduler_threads": self.config.scheduler_threads},
        )
        if self._own_session is not None and self._eager_spark:
            # the JVM and the Python workers start while the first ticks open stores and plan
            self._own_session.start()
        pipelines = list(self._pipelines.values())
        starts = staggered_starts(len(pipelines), self.config.interval_seconds)
        for pipeline_config, first_run in zip(pipelines, starts, strict=True):
            self._schedule(pipeline_config, first_run)
        if self.config.patterns:
            self._scheduler.add_job(
                self._follow_patterns,
                "interval",
                seconds=self.config.interval_seconds,
                id=FOLLOW_PATTERNS_JOB,
                next_run_time=datetime.datetime.now(datetime.timezone.utc)
                + datetime.timedelta(seconds=self.config.interval_seconds),
            )
        self._scheduler.start()
        try:
            while not self._stop.wait(0.2):
                if self._fatal:
                    break
                if self._own_session is not None:
                    self._own_session.stop_if_idle()
        finally:
            self._shutdown()
        if self._setup_error is not None:
            raise self._setup_error  # the command line prints its one line and exits 2
        if self._fatal:
            log.error("exiting after repeated failures", extra={"reason": self._fatal})
            return 1
        return 0

    def stop(self) -> None:
        self._stop.set()

    def _can_deliver(self) -> bool:
        """Whether this replica can deliver (it registers only then): `session_ready`."""
        return session_ready(self._spark, eager=self._eager_spark)

    # the followed tables ---------------------------------------------------------------
    def _follow(self, config: PipelineConfig) -> None:
        """Count `config`'s consumer among this service's: its job state, metrics and share."""
        self._jobs[config.consumer_id] = JobState()
        self.metrics.register_consumer(config.table, config.consumer_id)
        self._watch_consumer(config)
        self.assignment.add(config)
        self._pipelines[config.consumer_id] = config

    def _schedule(self, config: PipelineConfig, first_run: datetime.datetime) -> None:
        self._scheduler.add_job(
            self._tick,
            "interval",
            args=[config],
            seconds=self.config.interval_seconds,
            id=config.consumer_id,
            next_run_time=first_run,
        )

    def _follow_patterns(self, *, at_start: bool = False) -> None:
        """List each pattern's namespace and follow the tables new since the last poll, from now on.
        At the start a terminal error (a namespace or catalog that does not exist) ends the run (exit 2);
        later one is logged and the namespace listed again at the next poll, as a transient one is."""
        listing = self._followed.poll()
        for error in listing.errors:
            if at_start and isinstance(error, TerminalError):
                raise error
            log.error(
                "namespace not listed",
                extra={"error": message_line(error), "terminal": isinstance(error, TerminalError)},
            )
        now = datetime.datetime.now(datetime.timezone.utc)
        for config in listing.new:
            log.info("table followed", extra={"consumer": config.consumer_id, "table": config.table})
            self._follow(config)
            if not at_start:
                self._schedule(config, now)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        self._stop.set()
        for job in self._jobs.values():
            if job.pipeline is not None:
                job.pipeline.request_stop()

    def _shutdown(self) -> None:
        for job in self._jobs.values():
            if job.pipeline is not None:
                job.pipeline.request_stop()
        if self._own_session is not None and self._own_session.starting:
            # a JVM still starting (tens of seconds under load) is given up, not waited for: the
            # cycles waiting for it end at once, and nothing was read with it yet
            self._own_session.close(abandon=True)
        done = threading.Event()

        def wait_for_jobs() -> None:
            self._scheduler.shutdown(wait=True)
            done.set()

        threading.Thread(target=wait_for_jobs, daemon=True).start()
        if not done.wait(self.config.shutdown_timeout_seconds):
            log.warning("a batch did not stop in time; its uncommitted chunk will be replayed on restart")
        self._release_all()
        self._stores.close()  # before the registry leaves: it may remove a SQLite store nothing was written to
        self.assignment.stop()  # after the leases were released: the others claim them at once
        if self._own_session is not None:
            self._own_session.close(abandon=True)  # a warm-up job still running is cancelled, not left to log on exit
        self.server.stop()

    # one poll of one consumer ----------------------------------------------------------
    def _tick(self, config: PipelineConfig) -> None:
        job = self._jobs[config.consumer_id]
        if self._stop.is_set() or time.monotonic() < job.next_attempt_at:
            return
        try:
            if job.pipeline is None and not self._claim(config, job):
                return
            assert job.pipeline is not None
            update_lag(self.metrics, config, job)  # before: lag is visible while a long batch runs
            with scheduler_pool(config.consumer_id):  # a FAIR pool per table (a no-op under FIFO)
                job.pipeline.run()
            update_lag(self.metrics, config, job)
            self.metrics.record_success(config.table, config.consumer_id)
            if job.stopped:
                log.info("consumer delivering again", extra={"consumer": config.consumer_id, "table": config.table})
                self.metrics.set_stopped(config.table, config.consumer_id, False)
            if job.stopped or not job.last_ok:  # a stop recorded by this process or an earlier one
                job.pipeline.clear_stopped()
            job.consecutive_failures, job.last_ok, job.last_error, job.stopped = 0, True, "", False
            job.waits = 0
            reason = self.assignment.should_release(config)
            if reason is not None and not self._stop.is_set():  # at a batch boundary: every batch committed
                self._hand_over(config, job, reason)
        except Exception as exc:  # noqa: BLE001 - every failure is counted, logged, retried
            if self._stop.is_set():  # the shutdown ended the cycle (its session given up): not a failure
                log.info("cycle ended by the stop", extra={"consumer": config.consumer_id, "error": f"{exc}"[:300]})
                return
            if not (isinstance(exc, StateBusyError) and self._moved(config, job)):
                self._on_failure(config, job, exc)

    def _new_pipeline(self, config: PipelineConfig) -> Pipeline:
        return Pipeline(
            config,
            spark=self._spark,
            stop_event=self._stop,
            on_batch=self._on_batch(config),
            on_check=self._on_check(config),
            store=self._stores.store_for(config),  # one connection per store for every consumer
            share_manifest_cache=True,  # one bound for the process, not one per table
            owner=self.assignment.owner,
        )

    def _on_check(self, config: PipelineConfig) -> Any:
        """Counted as the snapshot is checked, so a mismatch that stops a strict batch is counted too."""

        def record(check: SnapshotCheck) -> None:
            failed = [m.rule for m in check.mismatches]
            self.metrics.record_snapshot_check(config.table, config.consumer_id, check.rules, failed)

        return record

    def _on_batch(self, config: PipelineConfig) -> Any:
        def record(outcome: BatchOutcome) -> None:
            self.metrics.record_batch(batch_report(config, outcome))
            log.info(
                "batch delivered" if outcome.completed else "batch bounded" if outcome.limited else "batch interrupted",
                extra={
                    "consumer": config.consumer_id,
                    "table": config.table,
                    "batch_id": outcome.batch_id,
                    "from_snapshot_exclusive": outcome.from_snapshot_exclusive,
                    "to_snapshot_inclusive": outcome.to_snapshot_inclusive,
                    "rows": outcome.rows_by_change_type,
                    "chunks": outcome.chunks,
                    "planning_seconds": round(outcome.planning_seconds, 3),
                    "batch_seconds": round(outcome.batch_seconds, 3),
                    "resumed": outcome.resumed,
                },
            )

        return record

    def _on_failure(self, config: PipelineConfig, job: JobState, exc: BaseException) -> None:
        """The failed cycle answered (failures.py); an answer that ends the process ends the run loop."""
        ending = self._failures.failed(config, job, exc)
        if ending is not None:
            if ending.setup_error is not None:
                self._setup_error = ending.setup_error
            self._fatal = ending.reason
            self._stop.set()  # no tick starts another cycle before the run loop sees the ending (a busy host)


def session_ready(session: Any, *, eager: bool) -> bool:
    """Whether a replica with this session can deliver: at once when its batches read in this
    process and start Spark on need; once the session is warm when every batch reads on Spark
    (`eager`: `--engine spark`, a bound of 0), or with a session given."""
    if session is None:
        return False
    if isinstance(session, SparkOnDemand) and not eager:
        return True
    return not getattr(session, "warming_up", False)


def staggered_starts(count: int, interval_seconds: float) -> list[datetime.datetime]:
    """First run times of `count` jobs spread evenly over the first interval (the first one now): with
    every table due at the same instant each poll was a burst of threads contending for the GIL and
    the store together (R33), and a burst that outlasted the interval never drained."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return [now + datetime.timedelta(seconds=interval_seconds * i / count) for i in range(count)]
