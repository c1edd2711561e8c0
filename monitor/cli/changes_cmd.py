"""`icetail changes` and `icetail plan`: one range, read once, no state."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.monitor.cli.arguments import column_list
from icetail.monitor.cli.output import check_output_writable, write_output
from icetail.monitor.cli.progress import Progress
from icetail.monitor.engine.api import (
    change_arrow_schema,
    check_row_lineage,
    identifier_names,
    iter_changes,
    output_schema,
)
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.columns import project, projected_schema
from icetail.monitor.engine.ranges import RangeBounds, parse_instant, plan_resolved, resolve_range
from icetail.monitor.engine.verify import verify_mode_with_filter
from icetail.monitor.planning.plan_report import format_plan, plan_summary
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.row_filter import checked_row_filter, parse_row_filter
from icetail.reader.spark import BackgroundSession
from icetail.sinks.debezium import FORMATS, EnvelopeSource, envelope_batches, envelope_schema


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


def _bounds(args: argparse.Namespace) -> RangeBounds:
    """The range the flags select: by snapshot id, tag or commit time (one per end), on --branch's history."""
    for end in ("from", "to"):
        given = [
            f"--{end}-{kind}" for kind in ("snapshot", "tag", "timestamp") if getattr(args, f"{end}_{kind}") is not None
        ]
        if len(given) > 1:
            raise ConfigError(f"{' and '.join(given)} both bound the {end}-end of the range; give one of them")
    return RangeBounds(
        from_snapshot_id_exclusive=args.from_snapshot,
        to_snapshot_id_inclusive=args.to_snapshot,
        from_timestamp_inclusive=_instant(args.from_timestamp, "--from-timestamp"),
        to_timestamp_inclusive=_instant(args.to_timestamp, "--to-timestamp"),
        from_tag=args.from_tag,
        to_tag=args.to_tag,
        branch=args.branch,
    )


def _instant(raw: str | None, flag: str) -> datetime.datetime | None:
    return parse_instant(raw, flag) if raw is not None else None


def cmd_changes(args: argparse.Namespace) -> int:
    """Everything that needs no data is checked before Spark starts; an empty range never starts it."""
    bounds = _bounds(args)
    check_output_writable(args.output)
    verify_mode_with_filter(args.verify, args.row_filter, "--verify")
    if args.row_filter is not None:
        parse_row_filter(args.row_filter)  # syntax first: before the catalog is opened
    if args.net and args.keep_carry_over:
        raise ConfigError("net changes always cancel carry-over rows; drop --keep-carry-over (carry_over_removal)")
    table = load_table(open_catalog(args.catalog), args.table)
    check_row_lineage(table, args.with_row_lineage)
    selected = resolve_range(table, bounds)  # metadata only: unknown ids, tags, branches end here
    identifier_names(table, selected.schema_id, args.identifier_columns)
    checked_row_filter(args.row_filter, output_schema(table, selected.schema_id), args.table)
    _output_schema(args, table, selected.schema_id)  # --columns names columns of the range's schema
    if not selected.has_changes:
        return _write_changes(args, table, plan_resolved(selected, row_filter=args.row_filter), None)
    session = BackgroundSession()  # the JVM and the Python workers start while we plan
    try:
        plan = plan_resolved(selected, row_filter=args.row_filter)
        if not plan.splits:  # snapshots without data files: nothing for Spark to read
            session.abandon()
            return _write_changes(args, table, plan, None)
        spark = session.result()
    except BaseException:
        session.abandon()  # fail now, not after the JVM finished starting
        raise
    try:
        return _write_changes(args, table, plan, spark)
    finally:
        session.close()


def _write_changes(args: argparse.Namespace, table: Table, plan: ChangePlan, spark: Any) -> int:
    progress = Progress(len(plan.splits))
    batches = iter_changes(
        table,
        plan,
        identifier_columns=args.identifier_columns,
        carry_over_removal=not args.keep_carry_over,
        spark=spark,
        on_chunk=progress if args.output != "-" else None,
        net=args.net,
        verify=args.verify,
        with_schema_id=args.with_schema_id,
        with_row_lineage=args.with_row_lineage,
        row_filter=args.row_filter,
        reconcile_partition_bytes=args.reconcile_partition_bytes,
    )
    try:
        schema = _output_schema(args, table, plan.schema_id)
        if args.columns:
            batches = project(batches, schema)
        if args.output_format == "debezium":
            source = EnvelopeSource(args.table, {c.snapshot_id: c.sequence_number for c in plan.commits})
            batches, schema = envelope_batches(batches, source), envelope_schema(schema)
        rows = write_output(args.output, schema, batches)
    finally:
        progress.close()
    if args.output != "-":
        print(f"{rows} change rows from {len(plan.commits)} snapshots written to {args.output}", file=sys.stderr)
    return 0


def _output_schema(args: argparse.Namespace, table: Table, schema_id: int | None) -> pa.Schema:
    schema = change_arrow_schema(
        table, schema_id, with_schema_id=args.with_schema_id, with_row_lineage=args.with_row_lineage
    )
    return projected_schema(schema, args.columns) if args.columns else schema


def cmd_plan(args: argparse.Namespace) -> int:
    bounds = _bounds(args)
    if args.row_filter is not None:
        parse_row_filter(args.row_filter)
    table = load_table(open_catalog(args.catalog), args.table)
    selected = resolve_range(table, bounds)
    checked_row_filter(args.row_filter, output_schema(table, selected.schema_id), args.table)
    plan = plan_resolved(selected, row_filter=args.row_filter)
    print(json.dumps(plan_summary(plan), indent=2) if args.json else format_plan(plan))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    changes = subparsers.add_parser("changes", help="write the row-level changes of a snapshot range")
    add_selection_arguments(changes)
    changes.add_argument("--output", required=True, help="PATH.parquet, PATH.jsonl, or - for JSON lines on stdout")
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
    changes.set_defaults(func=cmd_changes)
    plan = subparsers.add_parser("plan", help="print the plan (snapshots, tasks, files, splits) without reading rows")
    add_selection_arguments(plan)
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)
