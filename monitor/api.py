"""Python API: the change stream of a snapshot range as Arrow.

`iter_changes` streams record batches in plan order (snapshot ordinal, then file); snapshots
that can hold carry-overs or updates (both deletes and inserts) are gathered and reconciled
as a whole, every other snapshot streams chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from monitor.planner import ChangePlan, Planner
from reader.context import ReadContext
from reader.metadata_columns import change_schema
from reader.projection import arrow_schema, check_readable, key_field, struct_path
from reader.reconcile import reconcile_snapshot
from reader.spark import SplitRequest, run_splits, spark_session
from reader.split_reader import Chunk
from state.errors import ConfigError
from state.model import ChangeKind, ChangeSplit, ChangeTask, DeleteContent


def output_schema(table: Table, schema_id: int | None) -> Schema:
    """The schema change rows are projected onto (the to-snapshot's), by id; unreadable types refused."""
    schema = next((s for s in table.metadata.schemas if s.schema_id == schema_id), table.schema())
    check_readable(schema, ".".join(table.name()))
    return schema


def schema_id_of(table: Table, snapshot_id: int | None) -> int | None:
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot is None or snapshot.schema_id is None:
        return table.metadata.current_schema_id
    return snapshot.schema_id


def change_arrow_schema(table: Table, schema_id: int | None) -> pa.Schema:
    return change_schema(arrow_schema(output_schema(table, schema_id)))


def read_context(table: Table, schema_id: int | None, tasks: Iterable[ChangeTask]) -> ReadContext:
    equality_ids = {
        i
        for task in tasks
        for d in task.deletes_before + task.deletes_after
        if d.content == DeleteContent.EQUALITY
        for i in d.equality_field_ids
    }
    fields = {}
    for schema in sorted(table.metadata.schemas, key=lambda s: s.schema_id):
        for field_id in equality_ids:
            path = struct_path(schema, field_id)  # refuses keys inside lists and maps
            if path is not None:  # newest schema wins; a nested key becomes one flat field
                fields[field_id] = key_field(path)
    mapping = table.metadata.properties.get("schema.name-mapping.default")
    return ReadContext(
        io_properties=tuple(sorted(table.io.properties.items())),
        output_schema_json=output_schema(table, schema_id).model_dump_json(),
        equality_schema_json=Schema(*[fields[i] for i in sorted(fields)]).model_dump_json(),
        name_mapping_json=mapping,
        format_version=table.metadata.format_version,
    )


def identifier_names(table: Table, schema_id: int | None, requested: Sequence[str] | None) -> tuple[str, ...]:
    """`--identifier-columns` if given, else the table's identifier fields (names in the output schema)."""
    schema = output_schema(table, schema_id)
    if requested:
        unknown = [c for c in requested if c not in {f.name for f in schema.fields}]
        if unknown:
            raise ConfigError(
                f"identifier column(s) {', '.join(unknown)} not in the table schema; use top-level column names"
            )
        return tuple(requested)
    return tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)


def snapshots_needing_reconcile(tasks: Iterable[ChangeTask]) -> set[int]:
    """Snapshots whose tasks can yield both DELETE and INSERT rows."""
    deleting: set[int] = set()
    inserting: set[int] = set()
    for task in tasks:
        sid = task.commit.snapshot_id
        if task.kind in (ChangeKind.REMOVED, ChangeKind.MODIFIED):
            deleting.add(sid)
        if task.kind in (ChangeKind.ADDED, ChangeKind.MODIFIED):
            inserting.add(sid)
    return deleting & inserting


def iter_changes(
    table: Table,
    plan: ChangePlan,
    *,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    spark: Any = None,
    chunk_rows: int | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Change rows of `plan` in order, as record batches with `change_arrow_schema`."""
    schema = change_arrow_schema(table, plan.schema_id)
    if not plan.splits:
        return
    context = read_context(table, plan.schema_id, plan.tasks)
    identifiers = identifier_names(table, plan.schema_id, identifier_columns)
    gather = snapshots_needing_reconcile(plan.tasks) if (carry_over_removal or identifiers) else set()
    split_by_id: dict[str, ChangeSplit] = {s.split_id: s for s in plan.splits}
    session = spark or spark_session()
    held: list[pa.RecordBatch] = []
    held_snapshot: int | None = None
    for chunk in run_splits(session, context, [SplitRequest(s) for s in plan.splits], chunk_rows=chunk_rows):
        if on_chunk is not None:
            on_chunk(chunk)
        snapshot_id = split_by_id[chunk.split_id].task.commit.snapshot_id
        if held_snapshot is not None and snapshot_id != held_snapshot:
            yield from _reconciled(held, schema, identifiers, carry_over_removal)
            held, held_snapshot = [], None
        if chunk.batch is None or chunk.batch.num_rows == 0:
            continue
        if snapshot_id in gather:
            held.append(chunk.batch)
            held_snapshot = snapshot_id
        else:
            yield chunk.batch
    if held:
        yield from _reconciled(held, schema, identifiers, carry_over_removal)


def _reconciled(
    batches: list[pa.RecordBatch], schema: pa.Schema, identifiers: Sequence[str], carry_over_removal: bool
) -> Iterator[pa.RecordBatch]:
    table = reconcile_snapshot(pa.Table.from_batches(batches, schema=schema), identifiers or None, carry_over_removal)
    yield from table.to_batches()


def read_changes(
    table: Table,
    from_snapshot_id_exclusive: int | None = None,
    to_snapshot_id_inclusive: int | None = None,
    *,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    spark: Any = None,
) -> pa.Table:
    """Every change of (from_snapshot_id_exclusive, to_snapshot_id_inclusive] as one Arrow table."""
    plan = Planner(table).plan(from_snapshot_id_exclusive, to_snapshot_id_inclusive)
    batches = list(
        iter_changes(
            table, plan, identifier_columns=identifier_columns, carry_over_removal=carry_over_removal, spark=spark
        )
    )
    return pa.Table.from_batches(batches, schema=change_arrow_schema(table, plan.schema_id))
