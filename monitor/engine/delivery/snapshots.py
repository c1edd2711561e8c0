"""Snapshots delivered as a whole: a gathered snapshot (carry-over removal, update pairing) is
reconciled as one and delivered as chunks anchored at its first split, never cut by the chunks it
was read in (see docs/delivery.md).

- `WholeSnapshot`: reconciled in the driver and delivered as one chunk;
- `SnapshotPartitions`: too big for that (BatchShape.reconcile_partition_bytes), reconciled in
  partitions by Spark tasks, a chunk each (monitor/engine/partitioned.py says how a crash resumes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.delivery.context import DeliveryContext, Tally
from icetail.monitor.engine.partitioned import deliver_partitioned
from icetail.reader.changes.checks import SnapshotVerifier
from icetail.reader.changes.partitions import PartitionedSnapshot, partition_spec
from icetail.reader.changes.release import Release
from icetail.reader.split.context import ReadContext
from icetail.sinks.base import ChunkStager, SplitSlot
from icetail.state.checkpoint import ChunkCommit, InflightBatch, SplitProgress


@dataclass(frozen=True)
class WholeSnapshot:
    """One snapshot's reconciled rows as one chunk anchored at its first split, committed in one transaction."""

    context: DeliveryContext
    batch: InflightBatch
    tally: Tally

    def deliver(
        self,
        release: Release,
        rows: pa.Table,
        snapshot_splits: list[ChangeSplit],
        anchor_index: int,
        progress: Mapping[str, SplitProgress],
    ) -> None:
        """`rows`, reconciled from `release`, anchored at `snapshot_splits[0]` (`anchor_index` in the batch)."""
        context, batch = self.context, self.batch
        anchor = snapshot_splits[0]
        token = None
        if rows.num_rows:
            key = SplitSlot(context.consumer, batch.batch_id, anchor_index).chunk_key(anchor.split_id, 0)
            context.before_write("reconciled snapshot's sink write")
            token = context.sink.write(key, rows)
        next_rows: dict[str, int] = {}
        for chunk in release.chunks:
            next_rows[chunk.split_id] = max(next_rows.get(chunk.split_id, 0), chunk.next_row_exclusive)
        commits = [
            ChunkCommit(
                split_id=split.split_id,
                next_row_exclusive=max(
                    next_rows.get(split.split_id, 0), progress[split.split_id].next_row_exclusive or 0
                ),
                rows_in_chunk=rows.num_rows if split is anchor else 0,
                done=True,
                sink_token=token if split is anchor else None,
            )
            for split in snapshot_splits
            if not progress[split.split_id].done
        ]
        # one transaction: a crash cannot leave the snapshot half committed
        context.before_write("reconciled snapshot's offset commit")
        context.store.commit_chunks(context.consumer, batch.batch_id, commits, owner=context.owner)
        self.tally.add_rows(rows)
        context.renew_lease_if_due()


@dataclass(frozen=True)
class SnapshotPartitions:
    """A gathered snapshot reconciled in partitions by Spark tasks, each output a chunk anchored at
    its first split and committed as the anchor's `parts_done`."""

    context: DeliveryContext
    batch: InflightBatch
    tally: Tally
    read: ReadContext  # the batch's read context
    verifier: SnapshotVerifier | None
    stager: ChunkStager | None  # the Spark tasks stage each output (a staging sink), else None

    def deliver(
        self,
        snapshot: PartitionedSnapshot,
        progress: Mapping[str, SplitProgress],
        *,
        read_schema: pa.Schema,
        identifiers: tuple[str, ...],
        lineage_pairing: bool,
    ) -> bool:
        """Outputs from the first not committed; False when a stop request interrupted the snapshot."""
        context, batch = self.context, self.batch
        staged = self.stager is not None
        spec = partition_spec(
            snapshot,
            first_output=progress[snapshot.anchor.split_id].parts_done or 0,
            read_schema=read_schema,
            identifiers=identifiers,
            carry_over_removal=context.config.carry_over_removal,
            lineage_pairing=lineage_pairing,
            with_row_lineage=context.with_lineage,
            chunk_rows=batch.shape.chunk_rows,
            stage_as=SplitSlot(context.consumer, batch.batch_id, snapshot.indexes[0]) if staged else None,
        )
        return deliver_partitioned(
            context.session(),
            self.read,
            spec,
            snapshot,
            progress,
            self.stager,
            context.partition_delivery(batch, self.tally, self.verifier),
        )
