"""The Iceberg mirror's target shape: the source's data columns, keyed by the mirror's key.

Why identifier fields: they say in the target's own metadata what the rows are unique by, so
engines that upsert (Flink, pyiceberg's `upsert`) and readers of the copy find the key where
Iceberg keeps it. Identifier fields must be required, so the key columns are; the others are
optional. icetail's metadata columns (`_change_type`, ...) are not data and are left out; `_row_id`
is a column only when it is the key (a format-v3 source without identifier fields).

A target icetail has not followed the source into yet (no `icetail.source-field-ids` property) is
adopted only when it matches by name: same column names, same types (nested types by kind:
struct, list, map; a wider type than the source's is fine, rows are cast up), the key as
identifier fields; the first difference is refused in one line. From then on the target follows
the source's schema changes by field id (`iceberg_evolution`, dropping what the source drops) and
is checked again after each change.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import IcebergType, ListType, MapType, StructType

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.change_columns import LAST_UPDATED_SEQUENCE_NUMBER, METADATA_COLUMNS, ROW_ID, SCHEMA_ID
from icetail.sinks.iceberg.evolution import promotes
from icetail.sinks.iceberg.schema import sink_schema

NOT_DATA = frozenset({*METADATA_COLUMNS, SCHEMA_ID, LAST_UPDATED_SEQUENCE_NUMBER})


def source_columns(changes: pa.Schema, key: tuple[str, ...]) -> pa.Schema:
    """The change rows' data columns (plus `_row_id` when it is the key), source field ids kept."""
    return pa.schema([f for f in changes if f.name not in NOT_DATA and (f.name != ROW_ID or ROW_ID in key)])


def data_schema(changes: pa.Schema, key: tuple[str, ...]) -> pa.Schema:
    """The change rows' data columns (plus `_row_id` when it is the key), as the target's Arrow schema."""
    fields = list(source_columns(changes, key))
    missing = [k for k in key if k not in {f.name for f in fields}]
    if missing:
        raise SinkRejectedError(f"mirror key column(s) {', '.join(missing)} are not columns of the source")
    optional = sink_schema(pa.schema(fields))  # without field-id metadata, every field optional
    return pa.schema([f.with_nullable(f.name not in key) for f in optional])


def target_schema(changes: pa.Schema, key: tuple[str, ...]) -> Schema:
    """The Iceberg schema a missing target is created with: data columns, the key as identifier fields."""
    arrow = data_schema(changes, key)
    loose = _pyarrow_to_schema_without_ids(arrow)
    fresh = assign_fresh_schema_ids(loose)
    ids = [fresh.find_field(k).field_id for k in key]
    return Schema(*fresh.fields, schema_id=fresh.schema_id, identifier_field_ids=ids)


def check_target(existing: Schema, changes: pa.Schema, key: tuple[str, ...], where: str) -> None:
    """Refuse (one line, SinkRejectedError) an existing target whose columns, types or key differ."""
    check_shape(existing, target_schema(changes, key), where)


def check_shape(existing: Schema, wanted: Schema, where: str, kept: frozenset[str] = frozenset()) -> None:
    """Refuse (one line, SinkRejectedError) an existing target whose columns, types or identifier
    fields differ from `wanted`'s; columns named in `kept` may be there too (a history table keeps
    the columns the source dropped)."""
    key = tuple(wanted.find_column_name(i) or "" for i in wanted.identifier_field_ids)
    have = {f.name: f for f in existing.fields}
    want = {f.name: f for f in wanted.fields}
    extra = sorted(set(have) - set(want) - kept)
    missing = [n for n in want if n not in have]
    if missing or extra:
        what = (f"lacks column(s) {', '.join(missing)}" if missing else "") + (
            f"{'; ' if missing else ''}has column(s) the source lacks: {', '.join(extra)}" if extra else ""
        )
        raise SinkRejectedError(f"iceberg mirror target {where} does not match the source: it {what}")
    for name, field in want.items():
        if _shape(have[name].field_type) != _shape(field.field_type) and not promotes(
            field.field_type, have[name].field_type
        ):
            raise SinkRejectedError(
                f"iceberg mirror target {where} does not match the source: column {name} is "
                f"{_shape(have[name].field_type)}, the source's is {_shape(field.field_type)}"
            )
    identifiers = tuple(existing.find_column_name(i) for i in existing.identifier_field_ids)
    if sorted(n for n in identifiers if n) != sorted(key):
        shown = ", ".join(n for n in identifiers if n) or "none"
        raise SinkRejectedError(
            f"iceberg mirror target {where} does not match the source: its identifier fields are {shown}, "
            f"the mirror's key is {', '.join(key)}"
        )


def _shape(t: IcebergType) -> str:
    """A type as compared: primitives exactly, nested ones by kind (their field ids differ by table)."""
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return "list"
    if isinstance(t, MapType):
        return "map"
    return str(t)
