"""Iceberg's changelog metadata columns, appended to every change row."""

from __future__ import annotations

import functools

import pyarrow as pa

from icetail.kernel.model import ChangeType, CommitInfo

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_TIMESTAMP = "_commit_timestamp"

METADATA_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string(), nullable=False),
    pa.field(CHANGE_ORDINAL, pa.int32(), nullable=False),
    pa.field(COMMIT_SNAPSHOT_ID, pa.int64(), nullable=False),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
)
METADATA_COLUMNS = tuple(f.name for f in METADATA_FIELDS)

# On request (`--with-schema-id`): the id of the schema the row's commit snapshot was written
# with, named and typed after Iceberg's `_spec_id` metadata column. Last, after the four above.
SCHEMA_ID = "_schema_id"
SCHEMA_ID_FIELD = pa.field(SCHEMA_ID, pa.int32(), nullable=False)
_CONSTANT_FIELDS = (*METADATA_FIELDS, SCHEMA_ID_FIELD)  # every column that is constant per chunk


def change_schema(data_schema: pa.Schema, *, with_schema_id: bool = False) -> pa.Schema:
    return pa.schema(list(data_schema) + list(METADATA_FIELDS) + ([SCHEMA_ID_FIELD] if with_schema_id else []))


def constant_column_count(schema: pa.Schema) -> int:
    """How many trailing columns of a change-row schema are metadata, constant per chunk (0: none)."""
    count = len(METADATA_FIELDS) + (1 if schema.names[-1:] == [SCHEMA_ID] else 0)
    names = [f.name for f in _CONSTANT_FIELDS[:count]]
    return count if schema.names[-count:] == names else 0


def with_metadata(
    rows: pa.RecordBatch, change_type: ChangeType, commit: CommitInfo, *, with_schema_id: bool = False
) -> pa.RecordBatch:
    """`rows` plus the metadata columns (and `_schema_id` on request), every row of one change type and commit."""
    values: tuple[object, ...] = (change_type.value, commit.ordinal, commit.snapshot_id, commit.timestamp_ms * 1000)
    if with_schema_id:
        if commit.schema_id is None:
            raise ValueError(f"commit {commit.snapshot_id} has no schema id for {SCHEMA_ID}")
        values += (commit.schema_id,)
    return with_constant_metadata(rows, values)


def with_constant_metadata(rows: pa.RecordBatch, values: tuple[object, ...]) -> pa.RecordBatch:
    """`rows` plus the metadata columns holding `values` (change type, ordinal, snapshot id,
    commit time in microseconds[, schema id]) on every row."""
    extra = [_repeated(index, value, rows.num_rows) for index, value in enumerate(values)]
    schema = change_schema(rows.schema, with_schema_id=len(values) > len(METADATA_FIELDS))
    return pa.RecordBatch.from_arrays(list(rows.columns) + extra, schema=schema)


@functools.lru_cache(maxsize=64)
def _repeated(field_index: int, value: object, length: int) -> pa.Array:
    """One metadata column; chunks of one commit and size share it (Arrow arrays are immutable)."""
    return pa.repeat(pa.scalar(value, _CONSTANT_FIELDS[field_index].type), length)
