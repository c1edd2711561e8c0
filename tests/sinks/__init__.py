"""Sink tests: real files in tmp_path and a real pyiceberg SQL catalog on SQLite, no mocks."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icetail.kernel.model import ChangeType, CommitInfo
from icetail.reader.split.metadata_columns import with_metadata
from icetail.sinks.base import ChunkKey

CONSUMER = "orders-cdc"
CATALOG = "sinkcat"  # lowercase letters and digits: pyiceberg mangles `_` in variable names


def key(
    split_index: int = 0, row_start: int = 0, *, batch_id: str = "b000001-1a2b3c4d-c1000", consumer: str = CONSUMER
) -> ChunkKey:
    return ChunkKey(consumer, batch_id, split_index, f"split{split_index:03d}", row_start)


def change_rows(
    ids: list[int],
    *,
    snapshot_id: int = 1001,
    change_type: ChangeType = ChangeType.INSERT,
    extra: dict[str, pa.Array] | None = None,
) -> pa.Table:
    """Change rows as the reader emits them: data columns plus the four metadata columns."""
    data: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i}" for i in ids], pa.string()),
        **(extra or {}),
    }
    batch = pa.RecordBatch.from_pydict(data)
    commit = CommitInfo(
        snapshot_id=snapshot_id,
        parent_id=None,
        operation="append",
        timestamp_ms=1_767_225_600_000,
        sequence_number=1,
        ordinal=0,
    )
    return pa.Table.from_batches([with_metadata(batch, change_type, commit)])
