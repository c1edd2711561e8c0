"""The Iceberg sink table's shape: every column optional, rows conformed to it by name."""

from __future__ import annotations

import pyarrow as pa


def sink_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` without metadata and with every field optional: the shape of the sink table."""
    return pa.schema([pa.field(f.name, _optional(f.type), nullable=True) for f in schema])


def _optional(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _optional(f.type), nullable=True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(pa.field(t.key_field.name, _optional(t.key_type), nullable=False), _optional(t.item_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_optional(t.value_type))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_optional(t.value_type), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(_optional(t.value_type))
    return t


def conform(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """`rows` as the table's arrow schema: columns by name, cast; missing columns as nulls."""
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in target
    ]
    return pa.Table.from_arrays(columns, schema=target)
