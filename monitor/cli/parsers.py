"""The command line's grammar: every command, its flags and their help, and nothing else.

This module imports only argparse and icetail's light setting modules, so `icetail --help`,
`--version` and a misspelt flag answer in milliseconds. Each command names its handler as
`module:function` of icetail.monitor.cli; main.py imports that module only once the arguments
parsed, so the heavy imports (pyiceberg, pyarrow, Spark) are paid only by a command that runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from icetail.kernel.settings import (
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_LOCAL_MAX_BYTES,
    DEFAULT_SPARK_IDLE_STOP_SECONDS,
    ENGINES,
    FORMATS,
    LOCAL_MAX_BYTES_ENV,
    MISSING_CURSOR_POLICIES,
)

if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[Any]  # of main.py's SuggestingParser


def register_all(subparsers: SubParsers) -> None:
    for register in (register_changes, register_run, register_serve, register_demo):
        register(subparsers)


def column_list(text: str) -> tuple[str, ...]:
    """`a,b` -> ("a", "b"); at least one name."""
    columns = tuple(c.strip() for c in text.split(",") if c.strip())
    if not columns:
        raise argparse.ArgumentTypeError("needs at least one column name, e.g. a,b")
    return columns


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog", required=True, help="pyiceberg catalog name (.pyiceberg.yaml or PYICEBERG_CATALOG__*)"
    )
    parser.add_argument("--table", required=True, help="NAMESPACE.TABLE")
    parser.add_argument("--from-snapshot", type=_snapshot_id, default=None, help="exclusive; default: before the first")
    parser.add_argument(
        "--to-snapshot", type=_snapshot_id, default=None, help="inclusive; default: the current snapshot"
    )
    parser.add_argument("--from-tag", default=None, help="exclusive: start after the snapshot this tag points at")
    parser.add_argument("--to-tag", default=None, help="inclusive: end at the snapshot this tag points at")
    time_zone = "(with an offset, +02:00 or Z; without one, UTC)"
    parser.add_argument(
        "--from-timestamp",
        default=None,
        help=f"inclusive: the snapshots committed at or after this ISO 8601 time {time_zone}",
    )
    parser.add_argument(
        "--to-timestamp",
        default=None,
        help=f"inclusive: the snapshots committed at or before this ISO 8601 time {time_zone}",
    )
    parser.add_argument(
        "--branch", default="main", help="read the history of this branch (default main; the to-end is its head)"
    )
    parser.add_argument(
        "--identifier-columns", type=column_list, default=None, help="a,b: pair DELETE/INSERT into updates"
    )
    parser.add_argument(
        "--filter",
        dest="row_filter",
        default=None,
        metavar="EXPR",
        help="only the changes of the rows this pyiceberg expression selects, e.g. \"region = 'eu' and id > 5\"; "
        "files that cannot match are not read",
    )


def _snapshot_id(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"snapshot id must be an integer, got {text!r}") from exc


def register_changes(subparsers: SubParsers) -> None:
    changes = subparsers.add_parser("changes", help="write the row-level changes of a snapshot range")
    add_selection_arguments(changes)
    changes.add_argument(
        "--output", default="-", help="PATH.parquet or PATH.jsonl (default -: JSON lines on stdout, as tail -f)"
    )
    changes.add_argument(
        "--columns",
        type=column_list,
        default=None,
        help="a,b: only these data columns (top-level), then the changelog columns; rows are the same",
    )
    changes.add_argument(
        "--format",
        dest="output_format",
        choices=FORMATS,
        default="changelog",
        help="changelog (default: one row per change, Iceberg's changelog columns) or debezium (one "
        "before/after/op/source record per change; an update is one record)",
    )
    changes.add_argument("--keep-carry-over", action="store_true", help="keep identical DELETE/INSERT pairs")
    changes.add_argument(
        "--net",
        action="store_true",
        help="each row's net effect over the range (gathers the range's changes; folded by Spark tasks "
        "in partitions above --reconcile-partition-bytes)",
    )
    changes.add_argument(
        "--verify",
        default="warn",
        help="check each snapshot against its summary: off | warn (default: log a mismatch) | strict (fail on it)",
    )
    changes.add_argument(
        "--reconcile-partition-bytes",
        type=int,
        default=None,
        help="a snapshot to reconcile (or a --net range) bigger than this (estimated parquet bytes) is reconciled "
        "by Spark tasks in partitions of about this size (default 8 MiB; 0: whole, in this process)",
    )
    changes.add_argument(
        "--with-schema-id", action="store_true", help="add _schema_id: the schema id of each row's commit snapshot"
    )
    changes.add_argument(
        "--with-row-lineage",
        action="store_true",
        help="v3 tables: add _row_id and _last_updated_sequence_number after the data columns",
    )
    add_engine_arguments(changes)
    changes.set_defaults(handler="changes_cmd:cmd_changes")
    plan = subparsers.add_parser("plan", help="print the plan (snapshots, tasks, files, splits) without reading rows")
    add_selection_arguments(plan)
    add_engine_arguments(plan)
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(handler="changes_cmd:cmd_plan")


def add_engine_arguments(parser: argparse.ArgumentParser, *, per_batch: bool = False) -> None:
    """Where `changes` reads its range (`plan` says which it would use, and why), or `run` and
    `serve` each batch (`per_batch`: no default here, so --config and ICETAIL_ENGINE may set it)."""
    what = "a batch" if per_batch else "the plan"
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None if per_batch else "auto",
        help=f"auto (default): read in this process, with no JVM, when {what} reads at most --local-max-bytes, "
        "else on Spark; spark or local: always there (the rows are the same)",
    )
    parser.add_argument(
        "--local-max-bytes",
        type=int,
        default=None,
        help=f"--engine auto reads a range of at most this many data and delete file bytes in this process "
        f"(default: ${LOCAL_MAX_BYTES_ENV}, else {DEFAULT_LOCAL_MAX_BYTES // (1024 * 1024)} MiB; 0: always Spark)",
    )


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
        "--max-rows-per-batch",
        type=int,
        default=None,
        help="end a batch at the first chunk at or after N change rows; the next batch resumes it (a snapshot "
        "reconciled whole is not cut; default: no bound)",
    )
    parser.add_argument(
        "--max-bytes-per-batch",
        type=int,
        default=None,
        help="end a batch at the first chunk at or after N data file bytes read; the next batch resumes it",
    )
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
        "--lease-ttl",
        default=None,
        help="a consumer's lease outlives its holder by this long: a dead process's consumers move to another "
        f"`serve` replica (or may be run again) after it, e.g. 30s, 2m (default {DEFAULT_LEASE_TTL_SECONDS:g}s)",
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
    add_engine_arguments(parser, per_batch=True)
    parser.add_argument(
        "--config", default=None, help="icetail.yaml with the same keys; ICETAIL_* variables override it, flags both"
    )


def register_run(subparsers: SubParsers) -> None:
    run = subparsers.add_parser("run", help="deliver changes to a sink exactly once, from the consumer's checkpoint")
    add_pipeline_arguments(run)
    run.add_argument("--once", action="store_true", help="run one batch")
    run.add_argument("--until-caught-up", action="store_true", help="run batches until caught up (the default)")
    run.set_defaults(handler="run_cmd:cmd_run")
    status = subparsers.add_parser("status", help="cursor, lag and in-flight progress of consumers")
    status.add_argument("--state", required=True, help="checkpoint store: sqlite:///path.db or postgresql://...")
    status.add_argument("--consumer", default=None, help="only this consumer (default: all in the store)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler="status_cmd:cmd_status")
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
    reset.set_defaults(handler="reset_cmd:cmd_reset")


def register_serve(subparsers: SubParsers) -> None:
    serve = subparsers.add_parser("serve", help="follow tables forever: scheduler, metrics, health endpoints")
    add_pipeline_arguments(serve)
    serve.add_argument("--interval", default=None, help="poll period, e.g. 5s, 500ms, 1m (default 5s)")
    serve.add_argument(
        "--metrics-host", default=None, help="default 0.0.0.0, every interface; 127.0.0.1: this machine only"
    )
    serve.add_argument("--metrics-port", type=int, default=None, help="default 9464; /metrics /healthz /readyz")
    serve.add_argument(
        "--max-failures",
        type=int,
        default=None,
        help="consecutive failures of a consumer before it stops: the process exits with one table, "
        "the others keep delivering with several (5)",
    )
    serve.add_argument("--shutdown-timeout", default=None, help="bound on a graceful stop (30s)")
    serve.add_argument(
        "--spark-idle-stop",
        default=None,
        help="the Spark session a big batch started stops after this long with no batch on it, e.g. 10m "
        f"(default {DEFAULT_SPARK_IDLE_STOP_SECONDS / 60:g}m)",
    )
    serve.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR or CRITICAL")
    serve.set_defaults(handler="serve_cmd:cmd_serve")


def register_demo(subparsers: SubParsers) -> None:
    parser = subparsers.add_parser("demo", help="create a local demo table and follow it (embedded defaults)")
    parser.add_argument("--dir", default=".icetail-demo", help="where the demo warehouse, catalog and state go")
    parser.set_defaults(handler="demo:cmd_demo")
