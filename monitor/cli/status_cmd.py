"""`icetail status`: each consumer's cursor, lag, work in flight and stop, read from the store."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any

from icetail.kernel.errors import ConsumerNotFoundError, IcetailError
from icetail.kernel.secrets import redact_text
from icetail.kernel.settings import MAIN_BRANCH
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.startup import cursor_problem
from icetail.monitor.planning.lineage import age_seconds, undelivered_snapshots
from icetail.monitor.planning.refs import table_on_branch
from icetail.state.checkpoint import Checkpoint, HistoryEntry, StoppedConsumer
from icetail.state.store import CheckpointStore, open_store


def status_of(
    checkpoint: Checkpoint,
    state_url: str,
    *,
    with_table: bool = True,
    last_batch: HistoryEntry | None = None,
    stopped: StoppedConsumer | None = None,
) -> dict[str, Any]:
    """Cursor, lag in snapshots and seconds, in-flight progress (lag needs the catalog).

    `cursor_condition` says whether the cursor can be continued (`ok`) or why not
    (`cursor_expired`, `chain_expired`, `not_descendant`); `collapsed` marks a repair batch;
    `stopped` (None unless) says why and since when `serve` stopped the consumer.
    """
    report: dict[str, Any] = {
        "consumer": checkpoint.consumer,
        "catalog": checkpoint.catalog,
        "table": checkpoint.table,
        "sink": checkpoint.sink,
        "branch": checkpoint.branch,
        "cursor_snapshot_id": checkpoint.cursor.snapshot_id,
        "cursor_committed_at": iso(checkpoint.cursor.timestamp_ms),
        "lease_owner": checkpoint.lease.owner if checkpoint.lease_is_live() and checkpoint.lease else None,
        "stopped": _stopped_report(stopped),
    }
    if checkpoint.inflight is not None:
        inflight = checkpoint.inflight
        report["inflight"] = {
            "batch_id": inflight.batch.batch_id,
            "from_snapshot_exclusive": inflight.batch.from_snapshot_exclusive,
            "to_snapshot_inclusive": inflight.batch.to_snapshot_inclusive,
            "splits_done": sum(1 for p in inflight.progress if p.done),
            "splits": len(inflight.progress),
            "rows_emitted": inflight.rows_emitted,
            "collapsed": inflight.batch.shape.collapsed,
            "schema_id": inflight.batch.shape.schema_id,
        }
    if last_batch is not None:
        report["last_batch"] = {
            "batch_id": last_batch.batch_id,
            "from_snapshot_exclusive": last_batch.from_snapshot_exclusive,
            "to_snapshot_inclusive": last_batch.to_snapshot_inclusive,
            "rows": last_batch.rows,
            "finished_at": iso(last_batch.finished_at_ms),
            "collapsed": last_batch.shape.collapsed,
            "schema_id": last_batch.shape.schema_id,
        }
    if with_table:
        report.update(lag_of(checkpoint, state_url))
    return report


def _stopped_report(stopped: StoppedConsumer | None) -> dict[str, Any] | None:
    if stopped is None:
        return None
    return {
        "reason": stopped.reason,
        "stopped_at": iso(stopped.stopped_at_ms),
        "reason_recorded_at": iso(stopped.updated_at_ms),
    }


def stopped_only_status(stopped: StoppedConsumer) -> dict[str, Any]:
    """A consumer `serve` stopped before its first run created it: nothing but the stop to report."""
    return {
        "consumer": stopped.consumer,
        "catalog": stopped.catalog,
        "table": stopped.table,
        "never_started": True,
        "stopped": _stopped_report(stopped),
    }


def lag_of(checkpoint: Checkpoint, state_url: str) -> dict[str, Any]:
    try:
        table = table_on_branch(load_table(open_catalog(checkpoint.catalog), checkpoint.table), checkpoint.branch)
    except IcetailError as exc:
        return {"lag_error": str(exc)}
    current = table.metadata.current_snapshot_id
    problem = cursor_problem(table.metadata, checkpoint.cursor, checkpoint.branch)
    if problem is not None:
        return {
            "current_snapshot_id": current,
            "cursor_condition": problem.condition.value,
            "lag_error": f"{problem.message}; {problem.fix(checkpoint.consumer, state_url)}",
        }
    try:
        pending = undelivered_snapshots(table.metadata, checkpoint.cursor.snapshot_id)
    except IcetailError as exc:
        return {"current_snapshot_id": current, "lag_error": str(exc)}
    return {
        "current_snapshot_id": current,
        "cursor_condition": "ok",
        "lag_snapshots": len(pending),
        "lag_seconds": age_seconds(pending, time.time()),
    }


def existing_store(url: str) -> CheckpointStore:
    """Open a store that must already exist: status and reset never create a store, a table or a
    schema, so a typo or another program's database (pyiceberg's catalog) is refused, not written."""
    return open_store(url, create=False)


def cmd_status(args: argparse.Namespace) -> int:
    with existing_store(args.state) as store:
        stopped = {s.consumer: s for s in store.stopped_consumers()}
        if args.consumer:
            checkpoint = store.load(args.consumer)
            if checkpoint is None and args.consumer not in stopped:
                raise not_in_store(args.consumer, args.state)
            checkpoints = [] if checkpoint is None else [checkpoint]
            stopped = {k: v for k, v in stopped.items() if k == args.consumer}
        else:
            checkpoints = [c for c in (store.load(s.consumer) for s in store.list_consumers()) if c is not None]
        last = {c.consumer: next(iter(store.history(c.consumer, 1)), None) for c in checkpoints}
        replicas = live_replicas(store)
    if not checkpoints and not stopped:
        where = redact_text(args.state)
        print(f"checkpoint store {where} has no consumers yet; `icetail run` creates one", file=sys.stderr)
    reports = [
        status_of(c, args.state, last_batch=last[c.consumer], stopped=stopped.get(c.consumer)) for c in checkpoints
    ]
    known = {c.consumer for c in checkpoints}
    reports += [stopped_only_status(s) for consumer, s in stopped.items() if consumer not in known]
    reports.sort(key=lambda r: str(r["consumer"]))
    if args.json:
        print(redact_text(json.dumps(reports, indent=2)))
    else:
        for r in reports:
            if r.get("never_started"):
                print(redact_text(f"{r['consumer']}: {r['catalog']}.{r['table']}, never started; {_stop_text(r)}"))
                continue
            lag_seconds = r.get("lag_seconds")
            line = (
                f"{r['consumer']}: {r['catalog']}.{r['table']}"
                + ("" if r["branch"] == MAIN_BRANCH else f" branch {r['branch']}")
                + f" -> {r['sink'] or 'sink not recorded yet'}, "
                f"cursor {cursor_text(r['cursor_snapshot_id'], r['cursor_committed_at'])}, "
                f"lag {r.get('lag_snapshots', '?')} snapshots / "
                + ("?" if lag_seconds is None else f"{lag_seconds:.1f}s")
            )
            if "inflight" in r:
                f = r["inflight"]
                line += (
                    f"; in flight {f['batch_id']}: {f['splits_done']}/{f['splits']} splits, {f['rows_emitted']} rows"
                )
                if f["schema_id"] is not None:
                    line += f", schema {f['schema_id']}"
            if r.get("cursor_condition", "ok") != "ok":
                line += f"; cursor {r['cursor_condition']}"
            if r.get("last_batch", {}).get("collapsed"):
                b = r["last_batch"]
                line += (
                    f"; last batch {b['batch_id']} collapsed history ({b['from_snapshot_exclusive']}, "
                    f"{b['to_snapshot_inclusive']}] (repair by a direct diff)"
                )
            if "lag_error" in r:
                line += f"; {r['lag_error']}"
            if r["stopped"] is not None:
                line += f"; {_stop_text(r)}"
            if r.get("lease_owner"):
                line += f"; held by {r['lease_owner']}"
            print(redact_text(line))
        if replicas:
            print(redact_text(f"serve replicas alive: {', '.join(replicas)}"))
    return 0


def live_replicas(store: CheckpointStore) -> list[str]:
    """The `serve` replicas whose heartbeat is live (state/replicas.py); a consumer's holder is its lease owner."""
    from icetail.state.replicas import ReplicaRegistry
    from icetail.state.store import SqlCheckpointStore

    if not isinstance(store, SqlCheckpointStore):
        return []
    return [
        replica.name + (" (starting)" if replica.starting else "")
        for replica, live in ReplicaRegistry(store).replicas()
        if live
    ]


def _stop_text(report: dict[str, Any]) -> str:
    stop = report["stopped"]
    return f"STOPPED by serve since {stop['stopped_at']}: {stop['reason']}"


def not_in_store(consumer: str, state_url: str) -> ConsumerNotFoundError:
    return ConsumerNotFoundError(f"consumer {consumer!r} is not in {redact_text(state_url)}; check --consumer")


def cursor_text(snapshot_id: int | None, committed_at: str | None) -> str:
    """`123 (2026-01-01T00:00:00+00:00)`, or what a cursor before any snapshot means."""
    if snapshot_id is None:
        return "before the first snapshot (the next run starts with the table's first snapshot)"
    return f"{snapshot_id} ({committed_at})"


def iso(timestamp_ms: int | None) -> str | None:
    if timestamp_ms is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="seconds")
