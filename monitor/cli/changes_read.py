"""The read behind `icetail changes` and `icetail plan`, once changes_cmd.py checked the arguments."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from icetail.monitor.cli.output import write_output
from icetail.monitor.cli.progress import Progress
from icetail.monitor.engine.api import iter_changes
from icetail.monitor.engine.columns import project, projected_schema
from icetail.monitor.engine.range_bounds import RangeBounds
from icetail.monitor.engine.ranges import plan_resolved, resolve_range
from icetail.monitor.planning.plan_report import format_plan, plan_summary
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.changes.read_setup import change_arrow_schema, check_row_lineage, identifier_names, output_schema
from icetail.reader.spark.background import BackgroundSession
from icetail.reader.split.row_filter import checked_row_filter, parse_row_filter
from icetail.sinks.debezium import EnvelopeSource, envelope_batches, envelope_schema


def write_changes(args: argparse.Namespace, bounds: RangeBounds, table: Table) -> int:
    """The range read and written to --output; what needs no data is checked before Spark starts."""
    if args.row_filter is not None:
        parse_row_filter(args.row_filter)  # syntax first: before any metadata is read
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


def print_plan(args: argparse.Namespace, bounds: RangeBounds, table: Table) -> int:
    if args.row_filter is not None:
        parse_row_filter(args.row_filter)
    selected = resolve_range(table, bounds)
    checked_row_filter(args.row_filter, output_schema(table, selected.schema_id), args.table)
    plan = plan_resolved(selected, row_filter=args.row_filter)
    print(json.dumps(plan_summary(plan), indent=2) if args.json else format_plan(plan))
    return 0


