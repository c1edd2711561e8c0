"""A `--net` batch: its net changes (reader/changes/net.py) as one chunk anchored at its first split.

A batch too big to fold in the driver (BatchShape.net_partitioned and reconcile_partition_bytes)
is folded by Spark tasks in partitions instead (partitioned_net.py); when that fold cannot be
exact (NetFoldNotExact, before any output) it is folded here after all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from icetail.monitor.engine.delivery.base import Delivery
from icetail.monitor.engine.delivery.context import BatchToDeliver, DeliveryContext, Tally
from icetail.monitor.engine.delivery.partitioned_net import PartitionedNetDelivery, net_lineage
from icetail.reader.changes.net_rows import net_rows
from icetail.reader.changes.net_shuffle import NetFoldNotExact
from icetail.reader.changes.read_setup import read_context
from icetail.reader.changes.release import releases, snapshot_batches
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.split.read import Chunk
from icetail.sinks.base import SplitSlot
from icetail.state.checkpoint import ChunkCommit

log = logging.getLogger("icetail.pipeline")


class Abandoned(Exception):
    """A stop request interrupted a net batch's read; nothing of the batch is committed."""


class NetDelivery(Delivery):
    """The batch's net changes as one chunk; in partitions by Spark tasks when it is that big."""

    def __init__(self, context: DeliveryContext) -> None:
        super().__init__(context)
        self.partitioned = PartitionedNetDelivery(context)

    def deliver(self, batch: BatchToDeliver, tally: Tally) -> bool:
        """Every split is read again from its first row (the net rows are a function of all of them),
        the rows are written under one chunk key and every split is committed done in one
        transaction: a crash before that commit leaves nothing committed, and the resumed batch
        reads the same persisted splits in the same order, so it writes the same rows under the
        same key. A stop request abandons the read; the batch stays in flight.
        """
        context, table, inflight = self.context, batch.table, batch.batch
        pending = [p for p in batch.inflight.progress if not p.done]
        if not pending:
            return True
        with_schema_id = context.config.with_schema_id
        lineage = net_lineage(batch, context)
        schema = lineage.read_schema(table, batch.schema_id, with_schema_id=with_schema_id)
        splits = batch.splits()
        partitioned = self.partitioned.partitions(batch)
        if partitioned is not None:
            try:
                return self.partitioned.deliver(batch, tally)
            except NetFoldNotExact as exc:
                if batch.progress()[partitioned.anchor.split_id].parts_done:
                    raise  # cannot be: the flag precedes every output
                log.info("batch %s: net changes folded in the driver: %s", inflight.batch_id, exc)
        snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in splits}
        requests = [SplitRequest(s, with_row_lineage=lineage.reads) for s in splits]
        read = read_context(table, batch.schema_id, [s.task for s in splits], with_schema_id=with_schema_id)
        next_rows: dict[str, int] = {}
        verifier = context.verifier(table, inflight)  # every split is read from its first row

        def chunks() -> Iterator[Chunk]:
            read_chunks = batch.engine.read(context.session, read, requests, inflight.shape.chunk_rows)
            for chunk in context.tallied(read_chunks, tally):
                next_rows[chunk.split_id] = max(next_rows.get(chunk.split_id, 0), chunk.next_row_exclusive)
                context.renew_lease_if_due()
                if context.stopped():
                    raise Abandoned
                yield chunk

        # the fold holds every row until the batch is read: a refused snapshot raises before any is written
        on_check = lambda c: context.checked(inflight, c, tally)  # noqa: E731
        released = releases(chunks(), snapshot_of, set(), verifier, on_check=on_check)
        try:
            rows = net_rows(lineage, schema, snapshot_batches(released), [s.task for s in splits], batch.identifiers)
        except Abandoned:
            return False
        anchor = inflight.splits[0]
        token = None
        if rows.num_rows:
            key = SplitSlot(context.consumer, inflight.batch_id, 0).chunk_key(anchor.split_id, 0)
            context.before_write("net changes' sink write")
            token = context.sink.write(key, rows)
        commits = [
            ChunkCommit(
                split_id=p.split_id,
                next_row_exclusive=max(p.next_row_exclusive or 0, next_rows.get(p.split_id, 0)),
                rows_in_chunk=rows.num_rows if p.split_id == anchor.split_id else 0,
                done=True,
                sink_token=token if p.split_id == anchor.split_id else None,
            )
            for p in pending
        ]
        context.before_write("net changes' offset commit")
        context.store.commit_chunks(context.consumer, inflight.batch_id, commits, owner=context.owner)
        tally.add_rows(rows)
        return True
