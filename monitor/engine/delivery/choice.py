"""Which way delivers: chosen once when the pipeline opens its sink, from what the sink can do.

What a sink can do is what it implements (icetail/sinks/base.py, keyed.py, debezium.py): it
stages chunks in Spark tasks (StagingSink), commits staged chunks in groups (GroupCommitSink),
applies chunks in groups (GroupWriteSink), or encodes each batch's rows (EnvelopeSink, which
`prepare`s for each batch). This module alone asks; the pipeline and the ways of delivering never
test a sink's type. A batch is then delivered by the way its stored shape names: `--net` batches
by NetDelivery, every other by OrderedDelivery, so a resumed batch goes the way it began.

A new way of delivering: a `Delivery` (base.py) in a module of its own, chosen here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.table import Table

from icetail.monitor.engine.config import GroupPolicy
from icetail.monitor.engine.delivery.base import Delivery
from icetail.monitor.engine.delivery.chunks import EachChunk, StagedGroups, WrittenGroups
from icetail.monitor.engine.delivery.context import BatchToDeliver, DeliveryContext, Tally, batch_schema_id
from icetail.monitor.engine.delivery.net import NetDelivery
from icetail.monitor.engine.delivery.ordered import OrderedDelivery
from icetail.monitor.engine.engine_choice import EngineChoice
from icetail.sinks.base import GroupCommitSink, Sink, StagingSink
from icetail.sinks.debezium import EnvelopeSink
from icetail.sinks.keyed.contract import GroupWriteSink
from icetail.state.checkpoint import Inflight, InflightBatch


@dataclass(frozen=True)
class ChosenDelivery:
    """The ways a run delivers its batches, chosen for its sink; `deliver` takes each batch its way."""

    context: DeliveryContext
    ordered: Delivery
    net: Delivery
    prepare: Callable[[InflightBatch], None] | None  # the sink's per-batch preparation, if it needs one

    def deliver(self, table: Table, inflight: Inflight, tally: Tally, engine: EngineChoice) -> bool:
        """Deliver the batch in flight, its splits read by `engine`; False when a stop request
        interrupted it (it stays in flight)."""
        batch = inflight.batch
        if not batch.splits:
            return True
        if self.prepare is not None:
            self.prepare(batch)
        schema_id = batch_schema_id(table, batch)
        to_deliver = BatchToDeliver(table, inflight, schema_id, self.context.identifiers(table, schema_id), engine)
        way = self.net if batch.shape.net else self.ordered
        return way.deliver(to_deliver, tally)


def choose_delivery(context: DeliveryContext) -> ChosenDelivery:
    """The ways of delivering to `context.sink`, as it can take chunks."""
    sink = context.sink
    writes = sink_writes(sink, context.config.group_policy)
    return ChosenDelivery(
        context,
        OrderedDelivery(context, writes, stages=isinstance(sink, StagingSink)),
        NetDelivery(context),
        _envelope_preparation(sink) if isinstance(sink, EnvelopeSink) else None,
    )


def sink_writes(sink: Sink, policy: GroupPolicy) -> type[EachChunk]:
    """How read chunks reach `sink` (chunks.py): in groups when it commits or writes groups and the
    policy groups (`--sink-commit-rows`, `--sink-commit-interval`), else one at a time."""
    if isinstance(sink, GroupWriteSink) and policy.groups:
        return WrittenGroups
    if isinstance(sink, GroupCommitSink) and policy.groups:
        return StagedGroups
    return EachChunk


def _envelope_preparation(sink: EnvelopeSink) -> Callable[[InflightBatch], None]:
    """What the Debezium envelope needs of each batch, from the batch as stored, so a replayed chunk
    encodes the same records: its commits' sequence numbers, and whether it is a full start."""

    def prepare(batch: InflightBatch) -> None:
        sink.prepare(batch.batch_id, _sequence_numbers(batch), full_start=_is_full_start(batch))

    return prepare


def _sequence_numbers(batch: InflightBatch) -> dict[int, int]:
    """The data sequence number of each commit of `batch` (the Debezium envelope's `source`)."""
    return {s.task.commit.snapshot_id: s.task.commit.sequence_number for s in batch.splits}


def _is_full_start(batch: InflightBatch) -> bool:
    """Whether `batch` reads one snapshot whole (`--start full`, or a diff from nothing after lost
    history): it starts before everything yet holds one commit that has a parent. From the batch
    as stored, so a resumed batch says the same."""
    commits = {s.task.commit for s in batch.splits}
    return batch.from_snapshot_exclusive is None and len(commits) == 1 and next(iter(commits)).parent_id is not None
