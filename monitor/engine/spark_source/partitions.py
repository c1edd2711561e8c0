"""A change plan cut into Spark input partitions (driver side) and one partition read (executor side).

Every partition is a frozen, picklable value carrying what an executor needs: the splits, the
ReadContext (file IO properties, output schema) and how to reconcile, so executors never
resolve a catalog. A snapshot that needs carry-over removal or update pairing (it both deletes
and inserts rows) is one partition, reconciled there as a whole by `reconcile_snapshot`, as
`icetail changes` does; the splits of other snapshots are packed into partitions by bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.errors import DataFileError, IcetailError
from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.api import identifier_names, read_context, snapshots_needing_reconcile
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.context import ReadContext
from icetail.reader.metadata_columns import change_schema
from icetail.reader.net import fold_range, net_key_columns
from icetail.reader.reconcile import reconcile_snapshot
from icetail.reader.split_reader import read_split

DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024  # estimated parquet bytes of packed (unreconciled) splits
MAX_SPLITS_PER_PARTITION = 64


@dataclass(frozen=True)
class ChangePartitionSpec:
    """Splits read by one Spark task; `reconcile`: they are all of one snapshot, reconciled together."""

    context: ReadContext
    splits: tuple[ChangeSplit, ...]
    reconcile: bool
    identifier_columns: tuple[str, ...]
    carry_over_removal: bool = True
    net: bool = False  # the partition is the whole range, folded into its net changes

    @property
    def arrow_schema(self) -> pa.Schema:
        return change_schema(self.context.output_arrow_schema, with_schema_id=self.context.with_schema_id)


def plan_partitions(
    table: Table,
    plan: ChangePlan,
    *,
    schema_id: int | None = None,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
    net: bool = False,
    with_schema_id: bool = False,
) -> list[ChangePartitionSpec]:
    """The partitions of `plan`, in plan order; rows are projected onto `schema_id` (default: the plan's).

    `net`: one partition, the whole range, since net changes need every row of the range in one place.
    """
    if not plan.splits:
        return []
    output_schema_id = plan.schema_id if schema_id is None else schema_id
    context = read_context(table, output_schema_id, plan.tasks, with_schema_id=with_schema_id)
    identifiers = identifier_names(table, output_schema_id, identifier_columns)
    if net:
        return [ChangePartitionSpec(context, plan.splits, True, identifiers, True, net=True)]
    gather = snapshots_needing_reconcile(plan.tasks) if (carry_over_removal or identifiers) else set()

    def spec(splits: list[ChangeSplit], reconcile: bool) -> ChangePartitionSpec:
        return ChangePartitionSpec(context, tuple(splits), reconcile, identifiers, carry_over_removal)

    partitions: list[ChangePartitionSpec] = []
    packed: list[ChangeSplit] = []
    packed_bytes = 0
    whole: list[ChangeSplit] = []  # the splits of the snapshot being gathered
    for split in plan.splits:
        snapshot_id = split.task.commit.snapshot_id
        if whole and whole[0].task.commit.snapshot_id != snapshot_id:
            partitions.append(spec(whole, True))
            whole = []
        if snapshot_id in gather:
            if packed:
                partitions.append(spec(packed, False))
                packed, packed_bytes = [], 0
            whole.append(split)
            continue
        size = max(split.estimated_bytes, 1)
        if packed and (len(packed) >= MAX_SPLITS_PER_PARTITION or packed_bytes + size > partition_bytes):
            partitions.append(spec(packed, False))
            packed, packed_bytes = [], 0
        packed.append(split)
        packed_bytes += size
    if whole:
        partitions.append(spec(whole, True))
    if packed:
        partitions.append(spec(packed, False))
    return partitions


def read_partition(spec: ChangePartitionSpec) -> Iterator[pa.RecordBatch]:
    """The change rows of one partition (runs in a Spark task); no empty batches."""
    if spec.net:
        yield from _net_batches(spec)
        return
    if not spec.reconcile:
        for split in spec.splits:
            yield from _split_batches(spec.context, split)
        return
    batches = [batch for split in spec.splits for batch in _split_batches(spec.context, split)]
    changes = pa.Table.from_batches(batches, schema=spec.arrow_schema)
    reconciled = reconcile_snapshot(changes, spec.identifier_columns or None, spec.carry_over_removal)
    yield from (batch for batch in reconciled.to_batches() if batch.num_rows)


def _net_batches(spec: ChangePartitionSpec) -> Iterator[pa.RecordBatch]:
    """The net changes of the range in `spec` (reader/net.py)."""
    batches = ((s.task.commit.snapshot_id, b) for s in spec.splits for b in _split_batches(spec.context, s))
    net = fold_range(spec.arrow_schema, batches, snapshots_needing_reconcile(s.task for s in spec.splits))
    result = net.result(net_key_columns(spec.arrow_schema, spec.identifier_columns))
    yield from (batch for batch in result.to_batches() if batch.num_rows)


def _split_batches(context: ReadContext, split: ChangeSplit) -> Iterator[pa.RecordBatch]:
    try:
        for chunk in read_split(context, split):
            if chunk.batch is not None and chunk.batch.num_rows:
                yield chunk.batch
    except IcetailError:
        raise
    except (OSError, pa.ArrowException) as exc:
        path = split.task.data_file.path
        raise DataFileError(f"data file {path} cannot be read ({exc}); restore the file or skip its snapshot") from exc
