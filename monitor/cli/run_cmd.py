"""`icetail run`, `icetail status` and `icetail reset`: the pipeline from the command line."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from typing import Any

from icetail.kernel.errors import ConfigError, ConsumerNotFoundError, IcetailError
from icetail.kernel.processes import lease_holder_is_dead
from icetail.kernel.secrets import redact_text
from icetail.monitor.cli.arguments import column_list
from icetail.monitor.cli.progress import Progress, describe
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.pipeline import Pipeline, PipelineConfig
from icetail.monitor.engine.startup import (
    MISSING_CURSOR_POLICIES,
    cursor_problem,
    initial_cursor,
    parse_start,
)
from icetail.monitor.planning.lineage import age_seconds, undelivered_snapshots
from icetail.monitor.planning.refs import MAIN_BRANCH, table_on_branch
from icetail.monitor.service.config import run_config
from icetail.sinks.debezium import FORMATS
from icetail.sinks.factory import normalize_sink_url
from icetail.state.checkpoint import Checkpoint, HistoryEntry, StoppedConsumer
from icetail.state.store import CheckpointStore, open_store
from icetail.state.urls import SqliteLocation, check_sqlite_folder, parse_store_url, store_place


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by `run` and `serve`; either may take them from --config or ICETAIL_* instead."""
    parser.add_argument("--catalog", help="pyiceberg catalog name")
    parser.add_argument("--table", help="NAMESPACE.TABLE to follow")
    parser.add_argument("--state", help="checkpoint store: sqlite:///path.db or postgresql://...")
    parser.add_argument(
        "--sink",
        help="parquet:///dir, iceberg://CATALOG/NS.TABLE[?mode=mirror|history], postgresql://...?table=S.T, "
        "jsonl:///f, -",
    )
    parser.add_argument("--consumer", default=None, help="consumer id (default: CATALOG.NS.TABLE)")
    parser.add_argument(
        "--start", default=None, help="earliest | latest | full | snapshot:ID | timestamp:ISO8601 | tag:NAME"
    )
    parser.add_argument("--branch", default=None, help="follow this branch instead of main (e.g. a WAP audit branch)")
    parser.add_argument(
        "--max-snapshots-per-batch", type=int, default=None, help="at most N snapshots per batch (default: all pending)"
    )
    parser.add_argument("--chunk-rows", type=int, default=None, help="rows between offset commits (default: row group)")
    parser.add_argument(
        "--sink-commit-rows",
        type=int,
        default=None,
        help="iceberg and postgresql sinks: commit chunks together until a commit holds N rows (default 1000000, "
        "0: each)",
    )
    parser.add_argument(
        "--sink-commit-interval",
        default=None,
        help="iceberg and postgresql sinks: or once the first chunk of a commit waited this long (default 10s, "
        "0s: each chunk)",
    )
    parser.add_argument(
        "--reconcile-partition-bytes",
        type=int,
        default=None,
        help="a snapshot to reconcile bigger than this (estimated parquet bytes) is reconciled by Spark tasks in "
        "partitions of about this size (default 8 MiB; 0: whole, in the driver)",
    )
    parser.add_argument(
        "--manifest-cache-entries",
        type=int,
        default=None,
        help="manifest entries kept decoded across batches and serve cycles (default 250000, about 0.5 KB each; "
        "0: none)",
    )
    parser.add_argument(
        "--identifier-columns", type=column_list, default=None, help="a,b: pair DELETE/INSERT into updates"
    )
    parser.add_argument(
        "--keep-carry-over", action="store_true", default=None, help="keep identical DELETE/INSERT pairs"
    )
    parser.add_argument(
        "--on-missing-cursor",
        choices=MISSING_CURSOR_POLICIES,
        default=None,
        help="the cursor snapshot expired or is not an ancestor of the head: fail (default; diff under "
        "--protect-cursor) | earliest | latest | full (the head's rows as INSERTs) | diff (the difference as one "
        "batch); see docs/delivery.md",
    )
    parser.add_argument("--protect-cursor", action="store_true", default=None, help="keep tag icetail-<consumer>")
    parser.add_argument(
        "--net", action="store_true", default=None, help="deliver each batch's net changes (docs/semantics.md)"
    )
    parser.add_argument(
        "--verify",
        default=None,
        help="check each snapshot against its summary: off | warn (default: log, count) | strict (refuse the batch)",
    )
    parser.add_argument(
        "--with-schema-id", action="store_true", default=None, help="add _schema_id (the row's schema id)"
    )
    parser.add_argument(
        "--format",
        dest="output_format",
        choices=FORMATS,
        default=None,
        help="changelog (default: icetail's change rows) or debezium (one before/after/op/source envelope per "
        "change) for the jsonl, stdout, parquet and callback sinks",
    )
    parser.add_argument(
        "--with-row-lineage",
        action="store_true",
        default=None,
        help="v3 tables: add _row_id and _last_updated_sequence_number to the change rows",
    )
    parser.add_argument(
        "--config", default=None, help="icetail.yaml with the same keys; ICETAIL_* variables override it, flags both"
    )


def cmd_run(args: argparse.Namespace) -> int:
    if args.once and args.until_caught_up:
        raise ConfigError("--once and --until-caught-up exclude each other")
    config = run_config(args)
    check_state_folder(config)
    progress = Progress(None, label="delivering")
    try:
        with Pipeline(config, on_chunk=progress) as pipeline:
            outcomes = pipeline.run(once=args.once)
    finally:
        progress.close()
    print(places_line(config), file=sys.stderr)
    for outcome in outcomes:
        print(describe(outcome), file=sys.stderr)
    if not outcomes:
        print(f"consumer {config.consumer_id}: caught up, nothing to deliver", file=sys.stderr)
    return 0


def places_line(config: PipelineConfig) -> str:
    """Where the consumer's state and rows went, resolved: `sqlite:///x.db` is relative to the working
    directory (SQLAlchemy's convention), a sink path is made absolute."""
    places = resolved_places(config)
    return f"consumer {config.consumer_id}: state {places['state']}, sink {places['sink']}"


def check_state_folder(config: PipelineConfig) -> None:
    """A SQLite store's folder must exist (state/urls.py): refused before Spark or a sink starts."""
    location = parse_store_url(config.state_url)
    if isinstance(location, SqliteLocation):
        check_sqlite_folder(location)


def resolved_places(config: PipelineConfig) -> dict[str, str]:
    # no password of a URL is shown (a PostgreSQL state or sink)
    return {"state": store_place(config.state_url), "sink": redact_text(normalize_sink_url(config.sink_url))}


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
        "cursor_committed_at": _iso(checkpoint.cursor.timestamp_ms),
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
            "finished_at": _iso(last_batch.finished_at_ms),
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
        "stopped_at": _iso(stopped.stopped_at_ms),
        "reason_recorded_at": _iso(stopped.updated_at_ms),
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


def _existing_store(url: str) -> CheckpointStore:
    """Open a store that must already exist: status and reset never create a store, a table or a
    schema, so a typo or another program's database (pyiceberg's catalog) is refused, not written."""
    return open_store(url, create=False)


def cmd_status(args: argparse.Namespace) -> int:
    with _existing_store(args.state) as store:
        stopped = {s.consumer: s for s in store.stopped_consumers()}
        if args.consumer:
            checkpoint = store.load(args.consumer)
            if checkpoint is None and args.consumer not in stopped:
                raise _not_in_store(args.consumer, args.state)
            checkpoints = [] if checkpoint is None else [checkpoint]
            stopped = {k: v for k, v in stopped.items() if k == args.consumer}
        else:
            checkpoints = [c for c in (store.load(s.consumer) for s in store.list_consumers()) if c is not None]
        last = {c.consumer: next(iter(store.history(c.consumer, 1)), None) for c in checkpoints}
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
                f"cursor {_cursor_text(r['cursor_snapshot_id'], r['cursor_committed_at'])}, "
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
            print(redact_text(line))
    return 0


def _stop_text(report: dict[str, Any]) -> str:
    stop = report["stopped"]
    return f"STOPPED by serve since {stop['stopped_at']}: {stop['reason']}"


def cmd_reset(args: argparse.Namespace) -> int:
    if args.to is None and args.sink is None and args.branch is None:
        raise ConfigError("reset needs --to POSITION, --sink URL, --branch NAME, or several of them")
    mode = None if args.to is None else parse_start(args.to, flag="--to")
    if mode is not None and mode.reads_full_snapshot:
        raise ConfigError("--to full is not a position; use earliest, latest, snapshot:ID or timestamp:T")
    sink = None if args.sink is None else normalize_sink_url(args.sink)
    with _existing_store(args.state) as store:
        checkpoint = store.load(args.consumer)
        if checkpoint is None:
            raise _not_in_store(args.consumer, args.state)
        lease = checkpoint.lease
        if lease is not None and checkpoint.lease_is_live() and lease_holder_is_dead(lease.owner):
            # a run killed on this host (SIGKILL, OOM): as `run` does, take over at once instead of
            # refusing for the rest of the TTL (chaos harness, issue 26: `reset --sink` after a SIGKILL)
            store.release_lease(args.consumer, lease.owner)
        cursor = None
        branch = args.branch or checkpoint.branch
        if mode is not None or args.branch is not None:
            # --to resolves on the history of the branch followed from now on, which must exist
            table = table_on_branch(load_table(open_catalog(checkpoint.catalog), checkpoint.table), branch)
        if mode is not None:
            cursor = initial_cursor(table.metadata, mode, checkpoint.table)
            if checkpoint.inflight is not None:
                store.abandon_batch(args.consumer, checkpoint.inflight.batch.batch_id)
            store.reset_cursor(args.consumer, cursor)
        if args.branch is not None and args.branch != checkpoint.branch:
            store.change_branch(args.consumer, args.branch)
        if sink is not None:
            store.change_sink(args.consumer, sink)
    if cursor is not None:
        where = _cursor_text(cursor.snapshot_id, _iso(cursor.timestamp_ms))
        print(f"consumer {args.consumer}: cursor reset to {where}", file=sys.stderr)
    if args.branch is not None:
        print(f"consumer {args.consumer}: follows branch {args.branch} from its cursor on", file=sys.stderr)
    if sink is not None:
        print(f"consumer {args.consumer}: delivers to {redact_text(sink)} from its cursor on", file=sys.stderr)
    return 0


def _not_in_store(consumer: str, state_url: str) -> ConsumerNotFoundError:
    return ConsumerNotFoundError(f"consumer {consumer!r} is not in {redact_text(state_url)}; check --consumer")


def _cursor_text(snapshot_id: int | None, committed_at: str | None) -> str:
    """`123 (2026-01-01T00:00:00+00:00)`, or what a cursor before any snapshot means."""
    if snapshot_id is None:
        return "before the first snapshot (the next run starts with the table's first snapshot)"
    return f"{snapshot_id} ({committed_at})"


def _iso(timestamp_ms: int | None) -> str | None:
    if timestamp_ms is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="seconds")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = subparsers.add_parser("run", help="deliver changes to a sink exactly once, from the consumer's checkpoint")
    add_pipeline_arguments(run)
    run.add_argument("--once", action="store_true", help="run one batch")
    run.add_argument("--until-caught-up", action="store_true", help="run batches until caught up (the default)")
    run.set_defaults(func=cmd_run)
    status = subparsers.add_parser("status", help="cursor, lag and in-flight progress of consumers")
    status.add_argument("--state", required=True, help="checkpoint store: sqlite:///path.db or postgresql://...")
    status.add_argument("--consumer", default=None, help="only this consumer (default: all in the store)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)
    reset = subparsers.add_parser("reset", help="move a consumer's cursor (refused while a run holds it)")
    reset.add_argument("--state", required=True, help="checkpoint store: sqlite:///path.db or postgresql://...")
    reset.add_argument("--consumer", required=True, help="the consumer id (icetail status lists them)")
    reset.add_argument("--to", default=None, help="earliest | latest | snapshot:ID | timestamp:ISO8601 | tag:NAME")
    reset.add_argument(
        "--sink", default=None, help="deliver to this sink from now on (the cursor stays unless --to is given)"
    )
    reset.add_argument(
        "--branch",
        default=None,
        help="follow this branch from now on (--to, when given, resolves on it; the cursor stays otherwise)",
    )
    reset.set_defaults(func=cmd_reset)
