"""Iceberg's changelog metadata columns, appended to every change row."""

from __future__ import annotations

import pyarrow as pa

from state.model import ChangeType, CommitInfo

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
    n = rows.num_rows
    extra = [
        pa.array([change_type.value] * n, pa.string()) if n else pa.array([], pa.string()),
        pa.array(_repeat(commit.ordinal, n), pa.int32()),
        pa.array(_repeat(commit.snapshot_id, n), pa.int64()),
        pa.array(_repeat(commit.timestamp_ms * 1000, n), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(list(rows.columns) + extra, schema=change_schema(rows.schema))


def _repeat(value: int, n: int) -> list[int]:
    return [value] * n
