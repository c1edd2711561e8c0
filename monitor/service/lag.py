"""A consumer's lag as `serve` measures it around each cycle: from the catalog and the checkpoint.

Measured before a cycle (so lag is visible while a long batch runs) and after it. A lost cursor
(expired, rolled back) or a followed branch that is gone has no measurable lag: NaN, and the
cycle reports why.
"""

from __future__ import annotations

import time

from icetail.kernel.errors import RefNotFoundError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.startup import cursor_problem
from icetail.monitor.planning.lineage import age_seconds, undelivered_snapshots
from icetail.monitor.planning.refs import table_on_branch
from icetail.monitor.service.metrics import Metrics
from icetail.monitor.service.replica_jobs import JobState
from icetail.state.checkpoint import Cursor


def update_lag(metrics: Metrics, config: PipelineConfig, job: JobState) -> None:
    """Lag, discovered snapshots and in-flight chunks from the catalog and the checkpoint."""
    assert job.pipeline is not None
    checkpoint = job.pipeline.checkpoint()
    if checkpoint is None:
        return
    try:
        table = table_on_branch(job.pipeline.table_as_is(), config.branch)
    except RefNotFoundError:  # the followed branch is gone: the run reports it (BranchDroppedError)
        metrics.set_lag_unknown(config.table, config.consumer_id)
        return
    metadata = table.metadata
    current = metadata.current_snapshot_id
    # a lost cursor (expired, rolled back) has no measurable lag: NaN; the cycle reports why
    problem = cursor_problem(metadata, checkpoint.cursor, config.branch)
    lost = problem is not None
    metrics.set_cursor_condition(
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
        metrics.record_discovered(config.table, config.consumer_id, discovered)
        job.last_seen_snapshot = current
    inflight = checkpoint.inflight
    metrics.set_inflight_chunks(
        config.table, config.consumer_id, len(inflight.pending()) if inflight is not None else 0
    )
    if lost:
        metrics.set_lag_unknown(config.table, config.consumer_id)
        return
    cursor_ts = checkpoint.cursor.timestamp_ms
    metrics.set_lag(
        config.table,
        config.consumer_id,
        snapshots=len(pending),
        seconds=age_seconds(pending, time.time()),
        cursor_commit_timestamp_seconds=cursor_ts / 1000 if cursor_ts else None,
    )
