"""The replica side of `serve`'s cycles: claim a consumer, hand it over, keep its lease.

A mixin of Service (scheduler.py), which owns the jobs and builds the pipelines; the decisions
(fair share, who holds what) are monitor/service/assignment.py's. A consumer another replica holds
is skipped quietly: not a failure, no error logged, never stopped after --max-failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from icetail.kernel.errors import message_line
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.service.assignment import Assignment
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.metrics import Metrics

log = logging.getLogger("icetail.serve")


@dataclass
class JobState:
    """Mutable per-consumer bookkeeping, touched only by that consumer's job thread."""

    pipeline: Pipeline | None = None
    consecutive_failures: int = 0
    waits: int = 0  # consecutive cycles failed on a WAIT_ERRORS error (not failures: see there)
    next_attempt_at: float = 0.0
    last_ok: bool = False
    last_error: str = ""
    last_seen_snapshot: int | None = None
    stopped: bool = False  # parked after max_failures while other consumers deliver (failures.py, Failures.parked)
    elsewhere: str = ""  # another replica (or run) holds the consumer: not this process's to deliver


def _holds(job: JobState) -> Callable[[], float]:
    return lambda: 1.0 if job.pipeline is not None else 0.0


class ReplicaJobs:
    """Service's consumers as one replica of several: each cycle claims, keeps or hands over its consumer."""

    config: ServiceConfig
    assignment: Assignment
    metrics: Metrics
    _jobs: dict[str, JobState]
    _pipelines: dict[str, PipelineConfig]

    def _watch_replicas(self) -> None:
        """`icetail_replicas_alive`, read at each scrape from the last roster."""
        self.metrics.replicas_alive.set_function(lambda: float(self.assignment.replicas_alive()))

    def _watch_consumer(self, config: PipelineConfig) -> None:
        """`icetail_consumer_owned`, read at each scrape: whether this replica holds the consumer open (1)
        or not (0: elsewhere, or nobody)."""
        owned = self.metrics.consumer_owned.labels(config.table, config.consumer_id)
        owned.set_function(_holds(self._jobs[config.consumer_id]))

    def _new_pipeline(self, config: PipelineConfig) -> Pipeline:
        raise NotImplementedError

    def _held(self, state_url: str) -> int:
        pipelines = list(self._pipelines.values())
        return sum(1 for p in pipelines if p.state_url == state_url and self._jobs[p.consumer_id].pipeline)

    def _keep_leases(self) -> None:
        """Renew the held consumers' leases between (and during) their cycles; a lost one is found by its cycle."""
        for consumer, job in list(self._jobs.items()):
            pipeline = job.pipeline
            try:
                if pipeline is not None:
                    pipeline.keep_lease()
            except Exception as exc:  # noqa: BLE001 - closed meanwhile, or taken over: the cycle reports it
                log.debug("lease not renewed", extra={"consumer": consumer, "error": message_line(exc)})

    def _claim(self, config: PipelineConfig, job: JobState) -> bool:
        """Open the consumer if this replica may claim it now (its fair share); skipped quietly if not."""
        with self.assignment.claim(config) as refused:
            if refused is not None:
                job.elsewhere = refused
                log.debug("consumer skipped", extra={"consumer": config.consumer_id, "reason": refused})
                return False
            expired = self.assignment.expired_holder(config)
            pipeline = self._new_pipeline(config)
            try:
                pipeline.open()
            except BaseException:
                pipeline.close()  # its own store connection; releases nothing it does not hold
                raise
            job.pipeline, job.elsewhere = pipeline, ""
            log.info("consumer claimed", extra={"consumer": config.consumer_id, "replica": self.assignment.owner})
            if expired is not None:
                log.warning(
                    "consumer taken over from an expired lease",
                    extra={"consumer": config.consumer_id, "replica": expired},
                )
                self.metrics.record_handover(config.table, config.consumer_id, "expired")
        return True

    def _moved(self, config: PipelineConfig, job: JobState) -> bool:
        """A StateBusyError because another replica holds the consumer (it claimed it first, or took
        it over once this one's lease expired): a hand-over, not a failure. The store refused the write."""
        holder = self.assignment.current_holder(config)
        if holder is None or not self.assignment.is_replica(config, holder):
            return False
        if job.pipeline is not None:
            log.warning("consumer taken over", extra={"consumer": config.consumer_id, "replica": holder})
            self._close_pipeline(job)
        job.elsewhere = f"leased to {holder}"
        log.debug("consumer skipped", extra={"consumer": config.consumer_id, "reason": job.elsewhere})
        return True

    def _hand_over(self, config: PipelineConfig, job: JobState, reason: str) -> None:
        log.info("consumer handed over", extra={"consumer": config.consumer_id, "reason": reason})
        self._close_pipeline(job)
        job.elsewhere, job.last_ok = "handed over", False
        self.metrics.record_handover(config.table, config.consumer_id, "joined")

    def _release_all(self) -> None:
        """On the way out: close every held consumer, releasing its lease for the others to claim at once."""
        for config in list(self._pipelines.values()):
            job = self._jobs[config.consumer_id]
            if job.pipeline is None:
                continue
            try:
                job.pipeline.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                log.warning("could not release the lease", exc_info=True)
                continue
            job.pipeline = None
            self.metrics.record_handover(config.table, config.consumer_id, "left")

    def _close_pipeline(self, job: JobState) -> None:
        pipeline, job.pipeline = job.pipeline, None
        if pipeline is not None:
            try:
                pipeline.close()  # releases the lease
            except Exception:  # noqa: BLE001
                log.warning("could not close the pipeline", exc_info=True)
