"""A batch delivered in plan order, chunk by chunk: the way of every batch but a `--net` one.

Its splits are read in plan order from their committed offsets. A chunk leaves as soon as it is
read, through the sink's writes (chunks.py); a gathered snapshot (carry-over removal, update
pairing) leaves whole, reconciled, as chunks anchored at its first split (snapshots.py), each in
its place among the others (reader/changes/release.py says when read chunks may leave).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.delivery.base import Delivery
from icetail.monitor.engine.delivery.chunks import EachChunk
from icetail.monitor.engine.delivery.context import BatchToDeliver, DeliveryContext, Tally
from icetail.monitor.engine.delivery.snapshots import SnapshotPartitions, WholeSnapshot
from icetail.monitor.engine.verify import VerifyMode
from icetail.reader.changes.partitions import PartitionedSnapshot, partitioned_snapshots, segments_in_order
from icetail.reader.changes.read_setup import change_arrow_schema, has_row_lineage, read_context
from icetail.reader.changes.release import Pairing, Release, gathered_snapshots, releases
from icetail.reader.spark.payloads import SplitRequest
from icetail.sinks.base import ChunkStager, SplitSlot, StagingSink
from icetail.state.checkpoint import SplitProgress


@dataclass(frozen=True)
class _Layout:
    """Where each split of a batch stands: its place, its snapshot, its progress, how it is read."""

    splits: tuple[ChangeSplit, ...]
    progress: dict[str, SplitProgress]
    index_of: dict[str, int]
    by_snapshot: dict[int, list[ChangeSplit]]
    gathered: set[int]  # snapshots reconciled whole
    partitioned: dict[int, PartitionedSnapshot]  # those of them reconciled in partitions, not yet done
    lineage_pairing: bool


class OrderedDelivery(Delivery):
    """Chunks in plan order to the sink, through the writes chosen for it (`writes`), gathered
    snapshots whole; `stages`: the sink can have the Spark tasks write its chunks (StagingSink)."""

    def __init__(self, context: DeliveryContext, writes: type[EachChunk], *, stages: bool) -> None:
        super().__init__(context)
        self.writes = writes
        self.stages = stages

    def deliver(self, batch: BatchToDeliver, tally: Tally) -> bool:
        context, config = self.context, self.context.config
        table, schema_id, identifiers, inflight = batch.table, batch.schema_id, batch.identifiers, batch.batch
        layout = self._layout(batch)
        with_lineage = context.with_lineage
        with_schema_id = config.with_schema_id
        # a staging sink (parquet, unpartitioned Iceberg) is written by the Spark tasks themselves
        stager = self._stager(batch) if self.stages else None
        requests = self._requests(batch, layout, stager)
        if not requests and not layout.partitioned:
            return True
        splits = layout.splits
        read = read_context(table, schema_id, [s.task for s in splits], with_schema_id=with_schema_id)
        fully_read = {r.split.split_id for r in requests if r.start_row_inclusive == 0}
        fully_read |= {s.split_id for p in layout.partitioned.values() for s in p.splits}
        verifier = context.verifier(table, inflight, fully_read)
        read_schema = change_arrow_schema(
            table, schema_id, with_schema_id=with_schema_id, with_row_lineage=with_lineage or layout.lineage_pairing
        )
        pairing = Pairing(read_schema, identifiers, config.carry_over_removal, layout.lineage_pairing, with_lineage)
        snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in splits}
        strict = context.verify == VerifyMode.STRICT
        # staged chunks of a group-committing sink (Iceberg) wait in a group and are committed together;
        # so do the read rows of a group-writing sink (the PostgreSQL mirror)
        writes = self.writes.for_batch(context, inflight, tally, staging=stager is not None)
        whole = WholeSnapshot(context, inflight, tally)
        in_partitions = SnapshotPartitions(context, inflight, tally, read, verifier, stager)

        def released_from(segment: list[SplitRequest]) -> Iterator[Release]:
            chunks = batch.engine.read(context.session, read, segment, inflight.shape.chunk_rows, stager)
            on_check = lambda c: context.checked(inflight, c, tally)  # noqa: E731
            yield from releases(
                context.tallied(chunks, tally), snapshot_of, layout.gathered, verifier, strict=strict, on_check=on_check
            )

        in_order = segments_in_order(requests, layout.index_of, layout.partitioned.values(), released_from)
        delivered_rows = 0  # change rows released to the sink by this run of the batch (for its row bound)
        for release in writes.flushing_on_failure(in_order):
            if isinstance(release, PartitionedSnapshot):
                writes.flush()
                partitions_done = in_partitions.deliver(
                    release,
                    layout.progress,
                    read_schema=read_schema,
                    identifiers=identifiers,
                    lineage_pairing=layout.lineage_pairing,
                )
                if not partitions_done:
                    return False
                if context.limit_reached(delivered_rows, tally.bytes_read):
                    return context.all_done()
                continue
            if release.reconcile:
                writes.flush()
                rows = pairing.reconciled(release.batches)
                snapshot_splits = layout.by_snapshot[release.snapshot_id]
                anchor_index = layout.index_of[snapshot_splits[0].split_id]
                whole.deliver(release, rows, snapshot_splits, anchor_index, layout.progress)
                delivered_rows += rows.num_rows
            else:
                for chunk in release.chunks:
                    key = SplitSlot(context.consumer, inflight.batch_id, layout.index_of[chunk.split_id]).chunk_key(
                        chunk.split_id, chunk.row_start_inclusive
                    )
                    writes.add(key, chunk)
                    delivered_rows += chunk.row_count
            if context.stopped():
                writes.flush()
                return False
            if context.limit_reached(delivered_rows, tally.bytes_read):
                writes.flush()  # the batch ends here; the next one resumes from the committed offsets
                return context.all_done()
        writes.flush()
        return not context.stopped() or context.all_done()

    def _stager(self, batch: BatchToDeliver) -> ChunkStager | None:
        """The task-side writer of the batch's change rows; None: the sink writes them from the driver."""
        config = self.context.config
        schema = change_arrow_schema(
            batch.table,
            batch.schema_id,
            with_schema_id=config.with_schema_id,
            with_row_lineage=self.context.with_lineage,
        )
        return cast(StagingSink, self.context.sink).stager(schema)

    def _layout(self, batch: BatchToDeliver) -> _Layout:
        """Each split's place, snapshot and progress; which snapshots are reconciled whole, and how."""
        config = self.context.config
        splits = batch.splits()
        lineage_pairing = has_row_lineage(batch.table)
        gathered = gathered_snapshots(
            [s.task for s in splits],
            carry_over_removal=config.carry_over_removal,
            identifiers=batch.identifiers,
            lineage_pairing=lineage_pairing,
        )
        progress = batch.progress()
        by_snapshot: dict[int, list[ChangeSplit]] = defaultdict(list)
        for split in splits:
            by_snapshot[split.task.commit.snapshot_id].append(split)
        partitioned = {
            snapshot_id: snapshot
            for snapshot_id, snapshot in partitioned_snapshots(
                splits, gathered, batch.batch.shape.reconcile_partition_bytes
            ).items()
            if any(not progress[s.split_id].done for s in snapshot.splits)
        }
        index_of = {s.split_id: i for i, s in enumerate(splits)}
        return _Layout(splits, progress, index_of, by_snapshot, gathered, partitioned, lineage_pairing)

    def _requests(self, batch: BatchToDeliver, layout: _Layout, stager: ChunkStager | None) -> list[SplitRequest]:
        """What to read, in plan order: a split from its committed offset, a gathered snapshot whole."""
        context = self.context
        with_lineage = context.with_lineage
        requests: list[SplitRequest] = []
        for split in layout.splits:
            snapshot_id = split.task.commit.snapshot_id
            progress = layout.progress
            if snapshot_id in layout.partitioned:
                continue  # reconciled by Spark tasks, in its place among the others (segments_in_order)
            if snapshot_id in layout.gathered:
                if any(not progress[s.split_id].done for s in layout.by_snapshot[snapshot_id]):
                    # reconcile needs the whole snapshot again, with the row ids it pairs by
                    requests.append(SplitRequest(split, 0, with_row_lineage=with_lineage or layout.lineage_pairing))
            elif not progress[split.split_id].done:
                start = progress[split.split_id].next_row_exclusive or 0
                stage_as = (
                    SplitSlot(context.consumer, batch.batch.batch_id, layout.index_of[split.split_id])
                    if stager is not None
                    else None
                )
                requests.append(SplitRequest(split, start, stage_as, with_row_lineage=with_lineage))
        return requests
