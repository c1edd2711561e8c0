"""Python API: the change stream of a snapshot range as Arrow.

`iter_changes` streams record batches in plan order (snapshot ordinal, then file); snapshots
that can hold carry-overs or updates (both deletes and inserts) are gathered and reconciled
as a whole, every other snapshot streams chunk by chunk.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ParamSpec

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeSplit
from icetail.kernel.settings import MAIN_BRANCH
from icetail.monitor.engine.columns import project, projected_schema
from icetail.monitor.engine.engine_choice import engine_for_plan
from icetail.monitor.engine.range_bounds import Instant, RangeBounds
from icetail.monitor.engine.ranges import plan_resolved, resolve_range
from icetail.monitor.engine.verify import VerifyMode, report, verifier_for, verify_mode_with_filter
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.changes.checks import SnapshotCheck
from icetail.reader.changes.net_rows import NetLineage, net_rows
from icetail.reader.changes.net_shuffle import NetFoldNotExact, net_outputs
from icetail.reader.changes.partitions import (
    PartitionedSnapshot,
    net_partitioned,
    net_spec,
    partition_spec,
    partitioned_snapshots,
    segments_in_order,
)
from icetail.reader.changes.read_setup import (
    change_arrow_schema,
    check_row_lineage,
    has_row_lineage,
    identifier_names,
    output_schema,
    read_context,
)
from icetail.reader.changes.release import Pairing, Release, gathered_snapshots, observed, releases, snapshot_batches
from icetail.reader.changes.shuffle import ShuffleOutput, shuffled_outputs
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.spark.session import is_connect, spark_session
from icetail.reader.split.read import Chunk
from icetail.reader.split.row_filter import checked_row_filter


def split_requests(
    splits: Iterable[ChangeSplit], gather: set[int], *, lineage_pairing: bool, with_row_lineage: bool
) -> list[SplitRequest]:
    """Fresh requests; a split reads lineage when it is output, or when its snapshot is paired by it."""
    return [
        SplitRequest(s, with_row_lineage=with_row_lineage or (lineage_pairing and s.task.commit.snapshot_id in gather))
        for s in splits
    ]


def iter_changes(
    table: Table,
    plan: ChangePlan,
    *,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    spark: Any = None,
    chunk_rows: int | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    net: bool = False,
    verify: str = "warn",
    on_check: Callable[[SnapshotCheck], None] | None = None,
    with_schema_id: bool = False,
    with_row_lineage: bool = False,
    row_filter: str | None = None,
    reconcile_partition_bytes: int | None = None,
    engine: str = "auto",
    local_max_bytes: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Change rows of `plan` in order, as record batches with `change_arrow_schema`.

    Rows are projected onto the plan's (to-snapshot's) schema; with `with_schema_id`, `_schema_id`
    holds the schema id of each row's commit snapshot, which may be older than the plan's.
    `net`: the range's net changes instead (reader/changes/net.py), gathered before the first row is yielded.
    On a v3 table the updates of a snapshot pair by `_row_id` first (docs/semantics.md);
    `with_row_lineage` adds the `_row_id` and `_last_updated_sequence_number` columns.
    `verify` (off, warn, strict) checks each snapshot against its summary (reader/changes/checks.py);
    under strict a snapshot is held until checked, so a refused snapshot yields nothing.
    `row_filter` (reader/split/row_filter.py): the changes of the rows it selects; plan with the same
    filter (`plan_range(table, bounds, row_filter=)`) so that files which cannot match are not read. A
    summary counts every row, so a filtered read is not verified (`strict` is refused).
    `reconcile_partition_bytes`: a snapshot to reconcile (or, with `net`, the range) bigger than this
    (estimated parquet bytes) is reconciled by Spark tasks in partitions of about this size
    (reader/changes/partitions.py, reader/changes/net_shuffle.py), so the driver never holds it whole;
    0: every snapshot whole, in the driver; None: the default (8 MiB). Spark Connect has no RDDs
    to shuffle with: there every snapshot is reconciled whole.
    `engine`, `local_max_bytes`: as changes_batch_reader's; `local` reconciles every snapshot whole, here.
    """
    if reconcile_partition_bytes is not None and reconcile_partition_bytes < 0:
        raise ConfigError(f"reconcile partition bytes must be >= 0, got {reconcile_partition_bytes}")
    mode = verify_mode_with_filter(verify, row_filter)
    check_row_lineage(table, with_row_lineage)
    if net and not carry_over_removal:
        raise ConfigError("net changes always cancel carry-over rows; drop --keep-carry-over (carry_over_removal)")
    choice = engine_for_plan(engine, plan.splits, local_max_bytes, spark_given=spark is not None)
    if not plan.splits:
        return
    context = read_context(
        table,
        plan.schema_id,
        plan.tasks,
        with_schema_id=with_schema_id,
        row_filter=checked_filter(table, plan, row_filter),
    )
    identifiers = identifier_names(table, plan.schema_id, identifier_columns)
    lineage_pairing = has_row_lineage(table)
    verifier = verifier_for(
        mode,
        table.metadata,
        plan.splits,
        from_snapshot_exclusive=plan.from_snapshot_id_exclusive,
        collapsed=plan.collapsed,
    )

    def checked(check: SnapshotCheck) -> None:
        if on_check is not None:
            on_check(check)
        report(check, mode)  # raises under strict: the held rows of the snapshot are dropped

    sessions: list[Any] = []

    def session() -> Any:
        if not sessions:
            sessions.append(spark or spark_session())
        return sessions[0]

    def read(requests: list[SplitRequest]) -> Iterator[Chunk]:
        chunks = choice.read(session, context, requests, chunk_rows)
        return chunks if on_chunk is None else observed(chunks, on_chunk)

    def partition_rows(outputs: Iterator[ShuffleOutput]) -> Iterator[pa.RecordBatch]:
        """Each output's rows in index order; every read chunk (all on the first output) is seen,
        and checked, before any row leaves, so a refused snapshot yields nothing."""
        for output in outputs:
            for chunk in output.read:
                if on_chunk is not None:
                    on_chunk(chunk)
                check = verifier.add(chunk) if verifier is not None else None
                if check is not None:
                    checked(check)
            rows = output.rows()
            if rows is not None:
                yield from rows.to_batches()

    partition_bytes = choice.reconcile_partition_bytes(reconcile_partition_bytes)
    snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in plan.splits}
    strict = mode == VerifyMode.STRICT
    if net:  # the fold holds every row until the range is read: a refused snapshot raises before any row
        lineage = NetLineage(keyed=lineage_pairing, output=with_row_lineage)
        schema = lineage.read_schema(table, plan.schema_id, with_schema_id=with_schema_id)
        folded = net_partitioned(plan.splits, partition_bytes)
        if folded is not None and not is_connect(session()):
            fold = net_spec(
                folded,
                first_output=0,
                read_schema=schema,
                identifiers=identifiers,
                row_lineage=lineage.keyed,
                output_lineage=lineage.output,
                chunk_rows=chunk_rows,
            )
            try:  # raised before any output: the range is then folded in the driver, as below
                first = next(outputs := net_outputs(session(), context, fold), None)
            except NetFoldNotExact as exc:
                log.info("net changes folded in the driver: %s", exc)
            else:
                if first is not None:
                    yield from partition_rows(itertools.chain([first], outputs))
                return
        chunks = read([SplitRequest(s, with_row_lineage=lineage.reads) for s in plan.splits])
        released = releases(chunks, snapshot_of, set(), verifier, on_check=checked)
        yield from net_rows(lineage, schema, snapshot_batches(released), plan.tasks, identifiers).to_batches()
        return
    gathered = gathered_snapshots(
        plan.tasks, carry_over_removal=carry_over_removal, identifiers=identifiers, lineage_pairing=lineage_pairing
    )
    requests = split_requests(plan.splits, gathered, lineage_pairing=lineage_pairing, with_row_lineage=with_row_lineage)
    read_schema = change_arrow_schema(
        table, plan.schema_id, with_schema_id=with_schema_id, with_row_lineage=lineage_pairing or with_row_lineage
    )
    pairing = Pairing(read_schema, identifiers, carry_over_removal, lineage_pairing, with_row_lineage)
    partitioned = partitioned_snapshots(plan.splits, gathered, partition_bytes) if partition_bytes else {}
    if partitioned and is_connect(session()):
        partitioned = {}
    index_of = {s.split_id: i for i, s in enumerate(plan.splits)}
    requests = [r for r in requests if r.split.task.commit.snapshot_id not in partitioned]

    def released_from(segment: list[SplitRequest]) -> Iterator[Release]:
        return releases(read(segment), snapshot_of, gathered, verifier, strict=strict, on_check=checked)

    for release in segments_in_order(requests, index_of, partitioned.values(), released_from):
        if isinstance(release, PartitionedSnapshot):
            spec = partition_spec(
                release,
                first_output=0,
                read_schema=read_schema,
                identifiers=identifiers,
                carry_over_removal=carry_over_removal,
                lineage_pairing=lineage_pairing,
                with_row_lineage=with_row_lineage,
                chunk_rows=chunk_rows,
                stage_as=None,
            )
            yield from partition_rows(shuffled_outputs(session(), context, spec))
        elif release.reconcile:
            yield from pairing.reconciled(release.batches).to_batches()
        else:
            yield from release.batches


def checked_filter(table: Table, plan: ChangePlan, row_filter: str | None) -> str | None:
    """`row_filter` checked against the plan's schema (a ConfigError naming the problem)."""
    return checked_row_filter(row_filter, output_schema(table, plan.schema_id), ".".join(table.name()), "row_filter")


P = ParamSpec("P")
log = logging.getLogger("icetail.changes")


WHOLE_HISTORY = RangeBounds()  # before the first snapshot to the head of main


def plan_range(table: Table, bounds: RangeBounds = WHOLE_HISTORY, *, row_filter: str | None = None) -> ChangePlan:
    """The plan of a range given by snapshot ids, tags or commit times (one of them per end; RangeBounds).

    The range is on the history of `bounds.branch` (default `main`): an omitted end is the branch's
    head, and times resolve on its history. `from_timestamp_inclusive` starts with the snapshots
    committed at or after it (Delta's `startingTimestamp`), `from_timestamp_exclusive` after it
    (Iceberg's changelog `start-timestamp`), `to_timestamp_inclusive` ends with those committed at
    or before it (both). `from_tag` is exclusive and `to_tag` inclusive, as the snapshot ids are;
    a from-bound that is not on the to-bound's history is refused (NotAncestorError).
    `row_filter`: leave out the data files that hold no row it selects (reader/split/row_filter.py).
    """
    resolved = resolve_range(table, bounds)
    # before any manifest is read: a syntax error or an unknown column is one line at once
    checked_row_filter(row_filter, output_schema(table, resolved.schema_id), ".".join(table.name()), "row_filter")
    return plan_resolved(resolved, row_filter=row_filter)


def changes_batch_reader(
    table: Table,
    from_snapshot_id_exclusive: int | None = None,
    to_snapshot_id_inclusive: int | None = None,
    *,
    from_timestamp_exclusive: Instant | None = None,
    from_timestamp_inclusive: Instant | None = None,
    to_timestamp_inclusive: Instant | None = None,
    branch: str = MAIN_BRANCH,
    from_tag: str | None = None,
    to_tag: str | None = None,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    spark: Any = None,
    net: bool = False,
    verify: str = "warn",
    with_schema_id: bool = False,
    with_row_lineage: bool = False,
    row_filter: str | None = None,
    columns: Sequence[str] | None = None,
    reconcile_partition_bytes: int | None = None,
    engine: str = "auto",
    local_max_bytes: int | None = None,
) -> pa.RecordBatchReader:
    """The changes of a range as a stream of record batches, for ranges too large for memory.

    Batches arrive in commit order; only a snapshot that can hold updates or carry-overs (both
    deletes and inserts) is gathered whole before it is reconciled. With `net`, the range's
    net changes (docs/semantics.md, "Net changes"): the whole range's changes are gathered first.
    `verify`: off, warn (log a
    snapshot whose changes disagree with its summary) or strict (raise SnapshotCheckError, a
    TerminalError, before any row of that snapshot is returned); see docs/semantics.md.
    `row_filter`: only the changes of the rows this pyiceberg expression selects, as if the table
    held only those (docs/semantics.md, "Row filters"); files that cannot match are not read.
    `columns`: only these top-level data columns, in that order, then the changelog columns; the
    rows are the same (as `changes --columns`: carry-overs and updates are found on every column).
    `reconcile_partition_bytes`: a snapshot with updates or carry-overs (or, with `net`, the range)
    bigger than this (estimated parquet bytes, default 8 MiB) is reconciled by Spark tasks in partitions
    of about this size, not whole in this process; 0: whole, here (as `changes --reconcile-partition-bytes`).
    `engine`: `auto` (default) reads in this process, no JVM, when the plan reads at most `local_max_bytes`
    (None: ICETAIL_LOCAL_MAX_BYTES, else 64 MiB) and no `spark` is given, else on Spark; `spark` or
    `local` force one (as `changes --engine`). The rows are the same either way.
    """
    bounds = RangeBounds(
        from_snapshot_id_exclusive,
        to_snapshot_id_inclusive,
        from_timestamp_exclusive=from_timestamp_exclusive,
        from_timestamp_inclusive=from_timestamp_inclusive,
        to_timestamp_inclusive=to_timestamp_inclusive,
        from_tag=from_tag,
        to_tag=to_tag,
        branch=branch,
    )
    plan = plan_range(table, bounds, row_filter=row_filter)
    batches = iter_changes(
        table,
        plan,
        identifier_columns=identifier_columns,
        carry_over_removal=carry_over_removal,
        spark=spark,
        net=net,
        verify=verify,
        with_schema_id=with_schema_id,
        with_row_lineage=with_row_lineage,
        row_filter=row_filter,
        reconcile_partition_bytes=reconcile_partition_bytes,
        engine=engine,
        local_max_bytes=local_max_bytes,
    )
    schema = change_arrow_schema(
        table, plan.schema_id, with_schema_id=with_schema_id, with_row_lineage=with_row_lineage
    )
    if columns is not None:  # checked against the range's schema before any row is read
        schema = projected_schema(schema, columns, "columns")
        batches = project(batches, schema)
    return pa.RecordBatchReader.from_batches(schema, batches)


def _read_whole(reader: Callable[P, pa.RecordBatchReader], name: str, doc: str) -> Callable[P, pa.Table]:
    """`reader`'s stream read into one table, with `reader`'s parameters (one signature, checked by mypy)."""

    def read_whole(*args: P.args, **kwargs: P.kwargs) -> pa.Table:
        return reader(*args, **kwargs).read_all()

    read_whole.__name__ = read_whole.__qualname__ = name
    read_whole.__doc__ = doc
    read_whole.__signature__ = inspect.signature(reader).replace(return_annotation="pa.Table")  # type: ignore[attr-defined]
    return read_whole


read_changes = _read_whole(
    changes_batch_reader,
    "read_changes",
    """Every change of (from, to] as one Arrow table (omitted ends: before the first snapshot, the
    branch's head); the parameters of `changes_batch_reader`, whose whole stream it reads.

    `branch` (default `main`) picks the history; `from_tag` (exclusive) and `to_tag` (inclusive)
    bound the range by tag instead of by snapshot id or time. Times (an aware datetime, naive as
    UTC, or epoch milliseconds): `from_timestamp_inclusive` (commits at or after it, as Delta's
    `startingTimestamp`), `from_timestamp_exclusive` (commits after it), `to_timestamp_inclusive`.
    `net`: each row's net effect over the range instead of every change (docs/semantics.md, "Net changes").
    `with_schema_id`: add `_schema_id`, the schema id of each row's commit snapshot (docs/semantics.md).
    `with_row_lineage` (v3 tables): add `_row_id` and `_last_updated_sequence_number` after the data columns.
    `row_filter`: the changes of the rows a pyiceberg expression selects (`"region = 'eu'"`).
    `columns`: only these data columns (then the changelog columns), as `changes --columns`.
    """,
)
