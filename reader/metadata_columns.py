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


def change_schema(data_schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(data_schema) + list(METADATA_FIELDS))


def with_metadata(rows: pa.RecordBatch, change_type: ChangeType, commit: CommitInfo) -> pa.RecordBatch:
    """`rows` plus the four metadata columns, every row of one change type and one commit."""
    values = (change_type.value, commit.ordinal, commit.snapshot_id, commit.timestamp_ms * 1000)
    return with_constant_metadata(rows, values)


def with_constant_metadata(rows: pa.RecordBatch, values: tuple[object, ...]) -> pa.RecordBatch:
    """`rows` plus the metadata columns holding `values` (change type, ordinal, snapshot id,
    commit time in microseconds) on every row."""
    extra = [_repeated(index, value, rows.num_rows) for index, value in enumerate(values)]
    return pa.RecordBatch.from_arrays(list(rows.columns) + extra, schema=change_schema(rows.schema))


@functools.lru_cache(maxsize=64)
def _repeated(field_index: int, value: object, length: int) -> pa.Array:
    """One metadata column; chunks of one commit and size share it (Arrow arrays are immutable)."""
    return pa.repeat(pa.scalar(value, METADATA_FIELDS[field_index].type), length)
