"""What a table fixes about a read of its changes: the change rows' columns, the identifier columns
updates pair by, whether its rows carry lineage, and the context every task reads a split with.

The Python API, the pipeline's delivery paths, `icetail changes` and the data source all set up
their reads here, so the same table gives the same change rows whichever way it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeTask, DeleteContent
from icetail.kernel.secrets import fileio_items
from icetail.reader.split.context import ReadContext
from icetail.reader.split.metadata_columns import change_schema
from icetail.reader.split.projection import arrow_schema_with_ids, check_readable, key_field, struct_path
from icetail.reader.split.row_lineage import MIN_FORMAT_VERSION, with_lineage_fields


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


def change_arrow_schema(
    table: Table, schema_id: int | None, *, with_schema_id: bool = False, with_row_lineage: bool = False
) -> pa.Schema:
    """The columns of the change rows: data (field ids as metadata), then `_row_id` and
    `_last_updated_sequence_number` if asked for, then the changelog columns, `_schema_id` on request."""
    data = arrow_schema_with_ids(output_schema(table, schema_id))
    return change_schema(with_lineage_fields(data) if with_row_lineage else data, with_schema_id=with_schema_id)


def has_row_lineage(table: Table) -> bool:
    """v3 and later tables track row lineage: their updates pair by `_row_id` (reconcile.py)."""
    return table.metadata.format_version >= MIN_FORMAT_VERSION


def check_row_lineage(table: Table, with_row_lineage: bool) -> None:
    """Refuse the lineage output columns on a table that has no row lineage."""
    if with_row_lineage and not has_row_lineage(table):
        raise ConfigError(
            f"--with-row-lineage needs a format-version 3 table, but {'.'.join(table.name())} is format-version "
            f"{table.metadata.format_version} and has no _row_id; drop the option, or upgrade the table to v3"
        )


def read_context(
    table: Table,
    schema_id: int | None,
    tasks: Iterable[ChangeTask],
    *,
    with_schema_id: bool = False,
    row_filter: str | None = None,
) -> ReadContext:
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
        io_properties=fileio_items(table.io.properties.items()),
        output_schema_json=output_schema(table, schema_id).model_dump_json(),
        equality_schema_json=Schema(*[fields[i] for i in sorted(fields)]).model_dump_json(),
        name_mapping_json=mapping,
        format_version=table.metadata.format_version,
        with_schema_id=with_schema_id,
        row_filter=row_filter,
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
