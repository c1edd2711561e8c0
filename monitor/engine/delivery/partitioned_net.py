"""A `--net` batch too big to fold in the driver: its net changes folded by Spark tasks in
partitions (reader/changes/net_shuffle.py), a chunk each, committed as the partitions of a reconciled
snapshot are (monitor/engine/partitioned.py): a crash resumes at the first partition not committed.
"""

from __future__ import annotations

from icetail.monitor.engine.delivery.base import Delivery
from icetail.monitor.engine.delivery.context import BatchToDeliver, DeliveryContext, Tally
from icetail.monitor.engine.partitioned import deliver_partitioned
from icetail.reader.changes.net_rows import NetLineage
from icetail.reader.changes.partitions import PartitionedSnapshot, net_partitioned, net_spec
from icetail.reader.changes.read_setup import has_row_lineage, read_context


class PartitionedNetDelivery(Delivery):
    """The net fold of a batch in partitions, as one "snapshot" of all its splits anchored at its first."""

    def partitions(self, batch: BatchToDeliver) -> PartitionedSnapshot | None:
        """The batch's splits cut in partitions; None: the batch is folded in the driver (net.py)."""
        shape = batch.batch.shape
        return net_partitioned(batch.splits(), shape.reconcile_partition_bytes) if shape.net_partitioned else None

    def deliver(self, batch: BatchToDeliver, tally: Tally) -> bool:
        """NetFoldNotExact before any output when the driver must fold it."""
        context, table, inflight = self.context, batch.table, batch.batch
        partitioned = self.partitions(batch)
        assert partitioned is not None, "a batch folded in the driver has no partitions"
        progress = batch.progress()
        lineage = net_lineage(batch, context)
        spec = net_spec(
            partitioned,
            first_output=progress[partitioned.anchor.split_id].parts_done or 0,
            read_schema=lineage.read_schema(table, batch.schema_id, with_schema_id=context.config.with_schema_id),
            identifiers=batch.identifiers,
            row_lineage=lineage.keyed,
            output_lineage=lineage.output,
            chunk_rows=inflight.shape.chunk_rows,
        )
        tasks = [s.task for s in partitioned.splits]
        read = read_context(table, batch.schema_id, tasks, with_schema_id=context.config.with_schema_id)
        verifier = context.verifier(table, inflight)  # every split is read from its first row
        delivery = context.partition_delivery(inflight, tally, verifier)
        return deliver_partitioned(context.session(), read, spec, partitioned, progress, None, delivery)


def net_lineage(batch: BatchToDeliver, context: DeliveryContext) -> NetLineage:
    """Keyed by `_row_id` on a v3 table: a function of the persisted splits (their first_row_ids),
    so a resumed batch folds the same rows the same way."""
    return NetLineage(keyed=has_row_lineage(batch.table), output=context.with_lineage)
