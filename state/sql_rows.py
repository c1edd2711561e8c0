"""The store's rows in Python: the consumer row and batch header the writes check, the column
lists the SQL names, and the decoders from a fetched row to a checkpoint value.

The column lists follow the store schema (state/migrations.py): a column added there is added
here, once, and every SELECT and INSERT that names the list follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from icetail.kernel.model import ChangeSplit
from icetail.state.checkpoint import BatchShape, Cursor, HistoryEntry, InflightBatch, Lease, StoppedConsumer


@dataclass(frozen=True)
class ConsumerRow:
    catalog: str
    table: str
    cursor: Cursor
    generation: int
    lease: Lease | None
    now_ms: int
    sink: str | None
    branch: str


@dataclass(frozen=True)
class BatchHeader:
    batch_id: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    to_timestamp_ms: int
    split_count: int
    created_at_ms: int
    shape: BatchShape

    def batch(self, splits: tuple[ChangeSplit, ...] = ()) -> InflightBatch:
        """The stored batch with `splits` (without them: its header, to compare with another batch)."""
        return InflightBatch(
            self.batch_id,
            self.from_snapshot_exclusive,
            self.to_snapshot_inclusive,
            self.to_timestamp_ms,
            splits,
            self.shape,
        )


CONSUMER_COLUMNS = (
    "catalog_name, table_name, cursor_snapshot_id, cursor_timestamp_ms, generation, lease_owner, lease_expires_at_ms, "
    "sink_url, branch"
)


def column_count(columns: str) -> int:
    return len(columns.split(","))


def placeholders(count: int) -> str:
    """`?, ?, ...` for an INSERT of `count` columns: the column lists grow with the store schema."""
    return ", ".join("?" * count)


# BatchShape, schemas 3, 5, 6, 7, 9
SHAPE_COLUMNS = (
    "chunk_rows, first_ordinal, snapshot_count, collapsed, net, schema_id, reconcile_partition_bytes, net_partitioned"
)
BATCH_COLUMNS = (
    "batch_id, from_snapshot_exclusive, to_snapshot_inclusive, to_timestamp_ms, split_count, created_at_ms, "
    + SHAPE_COLUMNS
)
HISTORY_COLUMNS = (
    "batch_id, from_snapshot_exclusive, to_snapshot_inclusive, row_count, split_count, started_at_ms, finished_at_ms, "
    + SHAPE_COLUMNS
)


STOPPED_SELECT = (
    "SELECT consumer, catalog_name, table_name, reason, stopped_at_ms, updated_at_ms FROM icetail_stopped_consumers"
)


def stopped_consumer(r: tuple[Any, ...]) -> StoppedConsumer:
    return StoppedConsumer(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]))


def history_entry(r: tuple[Any, ...]) -> HistoryEntry:
    return HistoryEntry(
        batch_id=r[0],
        from_snapshot_exclusive=r[1],
        to_snapshot_inclusive=r[2],
        rows=int(r[3]),
        split_count=int(r[4]),
        started_at_ms=int(r[5]),
        finished_at_ms=int(r[6]),
        shape=batch_shape(r[7:]),  # the shape columns close the history columns
    )


def batch_shape(columns: Sequence[Any]) -> BatchShape:
    """BatchShape from its typed columns (SQLite returns booleans as 0/1)."""
    chunk_rows, first_ordinal, snapshot_count, collapsed, net, schema_id, partition_bytes, net_partitioned = columns
    return BatchShape(
        chunk_rows=None if chunk_rows is None else int(chunk_rows),
        first_ordinal=int(first_ordinal),
        snapshot_count=int(snapshot_count),
        collapsed=bool(collapsed),
        net=bool(net),
        schema_id=None if schema_id is None else int(schema_id),
        reconcile_partition_bytes=None if partition_bytes is None else int(partition_bytes),
        net_partitioned=bool(net_partitioned),
    )


def shape_values(shape: BatchShape) -> tuple[int | None, int, int, bool, bool, int | None, int | None, bool]:
    return (
        shape.chunk_rows,
        shape.first_ordinal,
        shape.snapshot_count,
        shape.collapsed,
        shape.net,
        shape.schema_id,
        shape.reconcile_partition_bytes,
        shape.net_partitioned,
    )
