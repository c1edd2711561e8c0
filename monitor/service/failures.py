"""How `serve` answers a failed cycle: count it, back off, park the consumer, or end the process.

A failing cycle is retried with exponential backoff. After `max_failures` consecutive failures of
the only consumer, the process exits non-zero for the orchestrator to restart it; with several
tables one table's failures stop only that consumer (`parked`): the others keep delivering,
/readyz and `icetail_consumer_stopped` name it, and it is retried every MAX_BACKOFF_SECONDS, so a
table that is fixed resumes without a restart. The stop and its reason are recorded in the
consumer's checkpoint store for `icetail status`, and cleared when it delivers. The process exits
non-zero only once every consumer is stopped. A full local disk (WAIT_ERRORS; under the handoff, a
local sink or the SQLite store) is the machine's fault, not the table's: retried until space
returns, it neither stops a consumer nor the process. A Spark JVM that died (the out-of-memory
killer) takes the shared session with it: the process exits 1 at once, naming it, for the
orchestrator to restart it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from icetail.kernel.errors import (
    CatalogNotFoundError,
    ConfigError,
    IcetailError,
    LocalDiskFullError,
    SetupError,
    SparkSessionLostError,
    StateBusyError,
    TerminalError,
    TransientError,
    is_disk_full,
    message_line,
)
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.metrics import FailureStage, Metrics
from icetail.monitor.service.replica_jobs import JobState
from icetail.reader.spark.session_health import lost_session_error
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


@dataclass(frozen=True)
class Ending:
    """Why the process must end (`reason`, logged; exit 1), or the setup error it ends on (exit 2)."""

    reason: str
    setup_error: IcetailError | None = None


class Failures:
    """Answers the failed cycles of `jobs` (every consumer of the service, by id)."""

    def __init__(self, config: ServiceConfig, metrics: Metrics, jobs: dict[str, JobState]) -> None:
        self._config = config
        self._metrics = metrics
        self._jobs = jobs

    def failed(self, config: PipelineConfig, job: JobState, exc: BaseException) -> Ending | None:
        """Count, log and back off a failed cycle; close its pipeline (unless another run holds the
        consumer); park the consumer or end the process when that is the answer."""
        exc = lost_session_error(exc) or exc  # a JVM killed under the cycle: say so, not "connection refused"
        stage = failure_stage(exc)
        self._metrics.record_failure(config.table, config.consumer_id, stage)
        self._metrics.set_lag_unknown(config.table, config.consumer_id)  # the failed look measured nothing
        waiting = waits_for_the_machine(exc)
        if waiting:
            job.waits += 1
        else:
            job.consecutive_failures += 1
        job.last_ok = False
        job.last_error = str(exc) if isinstance(exc, IcetailError) else f"{type(exc).__name__}: {exc}"
        interval = self._config.interval_seconds
        if waiting:
            backoff = min(MAX_WAIT_BACKOFF_SECONDS, interval * 2 ** (job.waits - 1))
        else:
            backoff = min(MAX_BACKOFF_SECONDS, interval * 2 ** (job.consecutive_failures - 1))
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
        alone = len(self._jobs) == 1 and not self._config.patterns  # a pattern may find more tables
        if isinstance(exc, SparkSessionLostError):  # every consumer shares the dead session: restart
            return Ending(f"{config.consumer_id}: {job.last_error}")
        if waiting:
            return None  # retried until space returns: neither the process nor the consumer stops
        if isinstance(exc, SETUP_ERRORS) and alone:
            return Ending(f"{config.consumer_id}: {job.last_error}", exc)
        if isinstance(exc, SETUP_ERRORS) or job.consecutive_failures >= self._config.max_failures:
            return Ending(f"{config.consumer_id}: {job.last_error}") if alone else self.parked(config, job)
        return None

    def parked(self, config: PipelineConfig, job: JobState) -> Ending | None:
        """Stop one consumer of several: retried every MAX_BACKOFF_SECONDS; the process ends only
        when every consumer is stopped (nothing it runs makes progress, a restart may help)."""
        if not job.stopped:
            job.stopped = True
            self._metrics.set_stopped(config.table, config.consumer_id, True)
            self._metrics.record_handover(config.table, config.consumer_id, "stopped")
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
        record_stop(config, job.last_error)  # again after a retry that failed: the latest reason
        jobs = list(self._jobs.items())
        if all(j.stopped for _, j in jobs):
            return Ending(
                "every consumer stopped: " + "; ".join(f"{consumer}: {j.last_error}" for consumer, j in jobs)
            )
        return None


def record_stop(config: PipelineConfig, reason: str) -> None:
    """The stop in the consumer's store, for `icetail status`; best effort (the store may be what failed)."""
    try:
        with open_store(config.state_url) as store:
            store.record_stopped(config.consumer_id, config.catalog, config.table, reason)
    except Exception as exc:  # noqa: BLE001 - /readyz and the metrics still name the stop
        log.warning(
            "could not record the stop in the checkpoint store",
            extra={"consumer": config.consumer_id, "error": message_line(exc)},
        )
