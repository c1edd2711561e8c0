"""Which PostgreSQL column holds which Arrow (Iceberg) column, and which type changes are widenings.

Types are spelled as PostgreSQL's `format_type` prints them, so a created column and an existing
one compare as strings. Iceberg -> Arrow -> PostgreSQL (docs/sinks.md has the table):
boolean -> boolean, int -> integer, long -> bigint, float -> real, double -> double precision,
decimal(p,s) -> numeric(p,s), string -> text, uuid -> uuid, binary/fixed -> bytea, date -> date,
time -> time without time zone, timestamp -> timestamp without time zone, timestamptz ->
timestamp with time zone (timestamp_ns too: PostgreSQL keeps microseconds), struct/list/map -> jsonb.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.change_columns import (
    LAST_UPDATED_SEQUENCE_NUMBER,
    METADATA_COLUMNS,
    ROW_ID,
    ROW_ID_FIELD_ID,
    SCHEMA_ID,
)

FIELD_ID_KEY = b"PARQUET:field_id"
NOT_DATA = frozenset({*METADATA_COLUMNS, SCHEMA_ID, LAST_UPDATED_SEQUENCE_NUMBER})
JSONB = "jsonb"
MAX_NAME_BYTES = 63
RESERVED = frozenset({"_icetail_op"})  # the staging table's op column (apply.OP)
_WIDER = {"smallint": ("integer", "bigint"), "integer": ("bigint",), "real": ("double precision",)}


@dataclass(frozen=True)
class Column:
    """A target column: its name, its PostgreSQL type, and the source field id it holds."""

    name: str
    pg_type: str
    field_id: int | None


def field_id(f: pa.Field) -> int | None:
    if f.name == ROW_ID:
        return ROW_ID_FIELD_ID
    raw = (f.metadata or {}).get(FIELD_ID_KEY)
    return int(raw) if raw is not None else None


def data_columns(schema: pa.Schema, key: tuple[str, ...]) -> tuple[Column, ...]:
    """The target's columns for change rows of `schema`: the data columns (and `_row_id` when it is the key)."""
    columns = tuple(
        Column(f.name, pg_type(f), field_id(f))
        for f in schema
        if f.name not in NOT_DATA and (f.name != ROW_ID or ROW_ID in key)
    )
    for column in columns:
        check_name(column.name, "column")
        if column.name in RESERVED:
            raise SinkRejectedError(f"column {column.name!r} has a name the PostgreSQL mirror uses itself; rename it")
    return columns


def check_name(name: str, what: str) -> None:
    """PostgreSQL cuts names longer than 63 bytes (NAMEDATALEN) silently: refuse them instead."""
    if len(name.encode()) > MAX_NAME_BYTES:
        raise SinkRejectedError(
            f"{what} name {name!r} is longer than PostgreSQL's {MAX_NAME_BYTES} bytes; rename it in the source"
        )


def pg_type(f: pa.Field) -> str:
    """The PostgreSQL type of Arrow field `f`; SinkRejectedError for a type it has no column for."""
    t = f.type
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return "uuid"
        t = t.storage_type
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_time(t):
        return "time without time zone"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz is not None else "timestamp without time zone"
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return JSONB
    raise SinkRejectedError(
        f"column {f.name!r} has type {t}, which the PostgreSQL mirror has no column type for; "
        "follow a projection of the table without it"
    )


def widens(old: str, new: str) -> bool:
    """Whether changing a column from `old` to `new` keeps every value (Iceberg's type promotions)."""
    if new in _WIDER.get(old, ()):
        return True
    if old.startswith("numeric(") and new.startswith("numeric("):
        (p1, s1), (p2, s2) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (old, new))
        return s1 == s2 and p2 > p1
    return False
