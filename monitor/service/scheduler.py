"""`icetail serve`: APScheduler polls each table; metrics, health and graceful shutdown.

One job per consumer, never overlapping itself (max_instances=1) and coalescing missed ticks,
so a slow batch delays the next tick instead of starting a second. All jobs share one
SparkSession. A failing cycle is retried with exponential backoff. After `max_failures`
consecutive failures of the only consumer, the process exits non-zero for the orchestrator to
restart it; with several tables one table's failures stop only that consumer (`_park`): the
others keep delivering, /readyz and `icetail_consumer_stopped` name it, and it is retried every
MAX_BACKOFF_SECONDS, so a table that is fixed resumes without a restart. The stop and its reason
are recorded in the consumer's checkpoint store for `icetail status`, and cleared when it delivers.
The process exits non-zero only once every consumer is stopped. A full local disk (WAIT_ERRORS;
under the handoff, a local sink or the SQLite store) is the machine's fault, not the table's:
retried until space returns, it neither stops a consumer nor the process. A Spark JVM that died
(the out-of-memory killer) takes the shared session with it: the process exits 1 at once, naming
it, for the orchestrator to restart it. SIGTERM/SIGINT
stop new ticks, let the chunk in
progress commit, and exit 0.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from icetail.kernel.errors import (
    CatalogNotFoundError,
    ConfigError,
    IcetailError,
    LocalDiskFullError,
    RefNotFoundError,
    SetupError,
    SparkSessionLostError,
    StateBusyError,
    TerminalError,
    TransientError,
    is_disk_full,
    message_line,
)
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline
from icetail.monitor.engine.startup import cursor_problem
from icetail.monitor.engine.verify import SnapshotCheck
from icetail.monitor.planning.lineage import age_seconds, undelivered_snapshots
from icetail.monitor.planning.refs import table_on_branch
from icetail.monitor.service.assignment import Assignment, beat_seconds
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import BatchReport, FailureStage, Metrics
from icetail.monitor.service.replica_jobs import JobState, ReplicaJobs
from icetail.reader.spark.session import scheduler_pool
from icetail.reader.spark.session_health import lost_session_error
from icetail.state.checkpoint import Cursor
from icetail.state.store import open_store

log = logging.getLogger("icetail.serve")

MAX_BACKOFF_SECONDS = 300.0
# Errors of the setup, not of the table or the data: no retry can fix them, so `serve` stops at
# once with exit 2 and the one-line message instead of retrying --max-failures times (with several
# tables: stops that consumer, naming the reason). SetupError: a database, role or schema that does
# not exist, a failed authentication, a missing privilege (of the sink or the store).
SETUP_ERRORS: tuple[type[IcetailError], ...] = (ConfigError, CatalogNotFoundError, SetupError)
# Errors of the machine, not of the table: a full local disk. Retried for as long as they last
# (space comes back: files removed, a volume grown) and never counted toward --max-failures, so
# the service neither exits nor parks the consumer; each failed cycle is logged and counted.
WAIT_ERRORS: tuple[type[IcetailError], ...] = (LocalDiskFullError,)
MAX_WAIT_BACKOFF_SECONDS = 30.0


def waits_for_the_machine(exc: BaseException) -> bool:
    """A WAIT_ERRORS failure, or a transient one whose cause is a full disk: under a local sink or the
    SQLite checkpoint store, as under the handoff (chaos harness, issue 26: a sink disk full for 15 s
    used to stop the service after --max-failures cycles, where a full handoff disk is waited out)."""
    return isinstance(exc, WAIT_ERRORS) or (isinstance(exc, TransientError) and is_disk_full(exc))


def failure_stage(exc: BaseException) -> FailureStage:
    """Which stage a failure belongs to, for `icetail_failures_total{stage}`: the error class says
    (`IcetailError.stage`); anything else broke while reading."""
    return FailureStage(exc.stage) if isinstance(exc, IcetailError) else FailureStage.READ


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
    """The metrics' view of a batch; an interrupted batch counts its chunks but no snapshots yet."""
    return BatchReport(
        table=config.table,
        consumer=config.consumer_id,
        from_snapshot_exclusive=outcome.from_snapshot_exclusive,
        to_snapshot_inclusive=outcome.to_snapshot_inclusive,
        snapshots=outcome.snapshots if outcome.completed else 0,
        rows_by_change_type=outcome.rows_by_change_type,
        data_files=outcome.data_files,
        bytes_read=outcome.bytes_read,
        row_groups=outcome.row_groups,
        delete_files=outcome.delete_files,
        deleted_rows=outcome.deleted_rows,
        splits=outcome.splits if outcome.completed else 0,
        chunks=outcome.chunks,
        planning_seconds=outcome.planning_seconds,
        batch_seconds=outcome.batch_seconds,
        collapsed=outcome.collapsed,
        sink_duplicate_keys=outcome.sink_duplicate_keys,
    )


class Service(ReplicaJobs):
    """Runs every configured pipeline on a schedule until stopped."""

    def __init__(self, config: ServiceConfig, *, registry: CollectorRegistry | None = None, spark: Any = None) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.metrics = Metrics.create(self.registry)
        self.server = MonitorServer(self.registry, self.readiness)
        self._spark = spark
        self._own_session: Any = None  # the BackgroundSession run() started, closed on shutdown
        self._stop = threading.Event()
        self._fatal: str | None = None
        self._setup_error: IcetailError | None = None
        self._jobs = {p.consumer_id: JobState() for p in config.pipelines}
        self._scheduler = build_scheduler(config.scheduler_threads)
        for p in config.pipelines:
            self.metrics.register_consumer(p.table, p.consumer_id)
        ttl = min(p.lease_ttl_seconds for p in config.pipelines)
        self.assignment = Assignment(config.pipelines, self._held, beat_s=beat_seconds(config.interval_seconds, ttl))
        self._watch_replicas()

    # health ----------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """Ready when every consumer has finished a successful cycle and its last cycle succeeded.

        Not ready before the first successful cycle of each consumer, and from a consumer's
        first failed cycle until its next successful one (a retrying consumer makes no progress).
        The reason names every consumer that is not ready, stopped ones first. One replica of several
        answers for the consumers it holds or is claiming only (a replica holding nothing because the
        others hold everything is ready), and is not ready while it holds more than its fair share.
        """
        stopped, failing, starting = [], [], []
        for consumer, job in self._jobs.items():
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
        if self._spark is None:
            from icetail.reader.spark.background import BackgroundSession

            # the JVM and the Python workers start while the first ticks open stores and plan;
            # a pipeline waits for the session only when its first batch reads. Several tables
            # share the cores fairly: each table's jobs go to a pool of its own (`_tick`)
            conf = spark_scheduler_conf(self.config.spark_scheduler_mode, len(self._jobs))
            self._spark = self._own_session = BackgroundSession("icetail-serve", conf)
        starts = staggered_starts(len(self.config.pipelines), self.config.interval_seconds)
        for pipeline_config, first_run in zip(self.config.pipelines, starts, strict=True):
            self._scheduler.add_job(
                self._tick,
                "interval",
                args=[pipeline_config],
                seconds=self.config.interval_seconds,
                id=pipeline_config.consumer_id,
                next_run_time=first_run,
            )
        self._scheduler.start()
        try:
            while not self._stop.wait(0.2):
                if self._fatal:
                    break
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
            self._own_session.abandon()
        done = threading.Event()

        def wait_for_jobs() -> None:
            self._scheduler.shutdown(wait=True)
            done.set()

        threading.Thread(target=wait_for_jobs, daemon=True).start()
        if not done.wait(self.config.shutdown_timeout_seconds):
            log.warning("a batch did not stop in time; its uncommitted chunk will be replayed on restart")
        self._release_all()
        self.assignment.stop()  # after the leases were released: the others claim them at once
        if self._own_session is not None:
            self._own_session.abandon()  # a warm-up job still running is cancelled, not left to log on exit
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
            self._update_lag(config, job)  # before: lag is visible while a long batch runs
            with scheduler_pool(config.consumer_id):  # a FAIR pool per table (a no-op under FIFO)
                job.pipeline.run()
            self._update_lag(config, job)
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
                "batch delivered" if outcome.completed else "batch interrupted",
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
        exc = lost_session_error(exc) or exc  # a JVM killed under the cycle: say so, not "connection refused"
        stage = failure_stage(exc)
        self.metrics.record_failure(config.table, config.consumer_id, stage)
        self.metrics.set_lag_unknown(config.table, config.consumer_id)  # the failed look measured nothing
        waiting = waits_for_the_machine(exc)
        if waiting:
            job.waits += 1
        else:
            job.consecutive_failures += 1
        job.last_ok = False
        job.last_error = str(exc) if isinstance(exc, IcetailError) else f"{type(exc).__name__}: {exc}"
        if waiting:
            backoff = min(MAX_WAIT_BACKOFF_SECONDS, self.config.interval_seconds * 2 ** (job.waits - 1))
        else:
            backoff = min(MAX_BACKOFF_SECONDS, self.config.interval_seconds * 2 ** (job.consecutive_failures - 1))
        job.next_attempt_at = time.monotonic() + backoff
        log.error(
            "cycle failed",
            extra={
                "consumer": config.consumer_id,
                "stage": stage.value,
                "error": job.last_error,
                "terminal": isinstance(exc, TerminalError),
                "consecutive_failures": job.consecutive_failures,
                "retry_in_seconds": round(backoff, 1),
            },
        )
        if job.pipeline is not None and not isinstance(exc, StateBusyError):
            try:
                job.pipeline.close()
            except Exception:  # noqa: BLE001
                log.warning("could not close the pipeline after a failure", exc_info=True)
            job.pipeline = None
        alone = len(self._jobs) == 1
        if isinstance(exc, SparkSessionLostError):  # every consumer shares the dead session: restart
            self._fatal = f"{config.consumer_id}: {job.last_error}"
            return
        if waiting:
            return  # retried until space returns: neither the process nor the consumer stops
        if isinstance(exc, SETUP_ERRORS) and alone:
            self._setup_error = exc
            self._fatal = f"{config.consumer_id}: {job.last_error}"
        elif isinstance(exc, SETUP_ERRORS) or job.consecutive_failures >= self.config.max_failures:
            if alone:
                self._fatal = f"{config.consumer_id}: {job.last_error}"
            else:
                self._park(config, job)

    def _park(self, config: PipelineConfig, job: JobState) -> None:
        """Stop one consumer of several: retried every MAX_BACKOFF_SECONDS; the process exits only
        when every consumer is stopped (nothing it runs makes progress, a restart may help)."""
        if not job.stopped:
            job.stopped = True
            self.metrics.set_stopped(config.table, config.consumer_id, True)
            self.metrics.record_handover(config.table, config.consumer_id, "stopped")
            log.error(
                "consumer stopped; the other consumers keep delivering",
                extra={
                    "consumer": config.consumer_id,
                    "table": config.table,
                    "error": job.last_error,
                    "retry_in_seconds": MAX_BACKOFF_SECONDS,
                },
            )
        job.next_attempt_at = time.monotonic() + MAX_BACKOFF_SECONDS
        self._record_stop(config, job.last_error)  # again after a retry that failed: the latest reason
        if all(j.stopped for j in self._jobs.values()):
            self._fatal = "every consumer stopped: " + "; ".join(
                f"{consumer}: {j.last_error}" for consumer, j in self._jobs.items()
            )

    def _record_stop(self, config: PipelineConfig, reason: str) -> None:
        """The stop in the consumer's store, for `icetail status`; best effort (the store may be what failed)."""
        try:
            with open_store(config.state_url) as store:
                store.record_stopped(config.consumer_id, config.catalog, config.table, reason)
        except Exception as exc:  # noqa: BLE001 - /readyz and the metrics still name the stop
            log.warning(
                "could not record the stop in the checkpoint store",
                extra={"consumer": config.consumer_id, "error": message_line(exc)},
            )

    def _update_lag(self, config: PipelineConfig, job: JobState) -> None:
        """Lag, discovered snapshots and in-flight chunks from the catalog and the checkpoint."""
        assert job.pipeline is not None
        checkpoint = job.pipeline.checkpoint()
        if checkpoint is None:
            return
        try:
            table = table_on_branch(job.pipeline.table_as_is(), config.branch)
        except RefNotFoundError:  # the followed branch is gone: the run reports it (BranchDroppedError)
            self.metrics.set_lag_unknown(config.table, config.consumer_id)
            return
        metadata = table.metadata
        current = metadata.current_snapshot_id
        # a lost cursor (expired, rolled back) has no measurable lag: NaN; the cycle reports why
        problem = cursor_problem(metadata, checkpoint.cursor, config.branch)
        lost = problem is not None
        self.metrics.set_cursor_condition(
            config.table, config.consumer_id, problem.condition.value if problem is not None else None
        )
        pending = [] if lost else undelivered_snapshots(metadata, checkpoint.cursor.snapshot_id)
        if current is not None and current != job.last_seen_snapshot:
            # new since the last look; on the first look, everything after the cursor
            seen = job.last_seen_snapshot
            if seen is None or cursor_problem(metadata, Cursor(seen, 0)):
                discovered = len(pending)
            else:
                discovered = len(undelivered_snapshots(metadata, seen))
            self.metrics.record_discovered(config.table, config.consumer_id, discovered)
            job.last_seen_snapshot = current
        inflight = checkpoint.inflight
        self.metrics.set_inflight_chunks(
            config.table, config.consumer_id, len(inflight.pending()) if inflight is not None else 0
        )
        if lost:
            self.metrics.set_lag_unknown(config.table, config.consumer_id)
            return
        cursor_ts = checkpoint.cursor.timestamp_ms
        self.metrics.set_lag(
            config.table,
            config.consumer_id,
            snapshots=len(pending),
            seconds=age_seconds(pending, time.time()),
            cursor_commit_timestamp_seconds=cursor_ts / 1000 if cursor_ts else None,
        )


def staggered_starts(count: int, interval_seconds: float) -> list[datetime.datetime]:
    """First run times of `count` jobs spread evenly over the first interval (the first one now): with
    every table due at the same instant each poll was a burst of threads contending for the GIL and
    the store together (R33), and a burst that outlasted the interval never drained."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return [now + datetime.timedelta(seconds=interval_seconds * i / count) for i in range(count)]
