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
from icetail.monitor.engine.engine_choice import (
    LOCAL,
    SPARK,
    choose_engine,
    local_max_bytes,
    planned_bytes,
    summary_bytes,
)
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
        return _write_changes(args, table, plan_resolved(selected, row_filter=args.row_filter), None, LOCAL)
    max_bytes = local_max_bytes(args.local_max_bytes)
    # the summaries say whether the range may be small: if not, the JVM and the Python workers
    # start while we plan; if so, planning first, and Spark only if the plan turns out bigger
    estimate = choose_engine(args.engine, summary_bytes(table, selected.snapshot_ids), max_bytes, spark_given=False)
    session = None if estimate.local else BackgroundSession()
    try:
        plan = plan_resolved(selected, row_filter=args.row_filter)
        choice = choose_engine(args.engine, planned_bytes(plan.splits), max_bytes, spark_given=False)
        if choice.local or not plan.splits:  # small, or no data files: nothing for Spark to read
            if session is not None:
                session.abandon()
            session = None
        else:
            session = session or BackgroundSession()
            spark = session.result()
    except BaseException:
        if session is not None:
            session.abandon()  # fail now, not after the JVM finished starting
        raise
    if session is None:
        return _write_changes(args, table, plan, None, LOCAL)
    try:
        return _write_changes(args, table, plan, spark, SPARK)
    finally:
        session.close()


def _write_changes(args: argparse.Namespace, table: Table, plan: ChangePlan, spark: Any, engine: str) -> int:
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
        engine=engine,
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
    choice = choose_engine(
        args.engine, planned_bytes(plan.splits), local_max_bytes(args.local_max_bytes), spark_given=False
    )
    if args.json:
        print(json.dumps({**plan_summary(plan), "engine": {"name": choice.engine, "reason": choice.reason}}, indent=2))
    else:
        print(f"{format_plan(plan)}\nengine: {choice.engine} ({choice.reason})")
    return 0
