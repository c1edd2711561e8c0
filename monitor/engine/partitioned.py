"""Delivery of a snapshot reconciled in partitions by Spark tasks, a chunk each: how a crash resumes it.

The partitions are cut by reader/changes/partitions.py, the same on every run of a batch. Output i
is written under `SplitSlot(consumer, batch, anchor index).chunk_key(anchor split, i)` (the anchor
is the snapshot's first split), then committed as the anchor's `parts_done = i + 1`; the last
output's commit also marks every split of the snapshot done, in the same transaction. A crash
resumes at the first output not committed: the splits are read again to rebuild the shuffle, and
the outputs below it are neither reconciled nor written again. A `--net` batch too big to fold in
the driver is delivered the same way: its outputs are the partitions of its net fold
(reader/changes/net_shuffle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from icetail.kernel.errors import ConfigError
from icetail.reader.changes.net_shuffle import NetShuffleSpec, net_outputs
from icetail.reader.changes.partitions import PartitionedSnapshot
from icetail.reader.changes.shuffle import ShuffleOutput, ShuffleSpec, shuffled_outputs
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkStager, Sink, SplitSlot, StagingSink
from icetail.state.checkpoint import ChunkCommit, SplitProgress
from icetail.state.store import CheckpointStore


@dataclass(frozen=True)
class PartitionDelivery:
    """The pipeline's side of a partitioned snapshot: where rows and offsets go, and its hooks."""

    sink: Sink
    store: CheckpointStore
    consumer: str
    owner: str
    batch_id: str
    on_read: Callable[[Chunk], None]  # every read chunk (no rows): tallies, --verify (may raise to refuse)
    on_delivered: Callable[[tuple[tuple[str, int], ...]], None]  # each output's rows by change type
    after_commit: Callable[[], None]  # lease renewal, test hold
    stopped: Callable[[], bool]  # a stop request: the snapshot stays in flight at the next output
    renew: Callable[[], None]  # the lease, while a Spark job of the snapshot runs
    before_write: Callable[[str], None]  # the lease's deadline checked (lease_clock.py), before each write


def deliver_partitioned(
    spark: Any,
    context: ReadContext,
    spec: ShuffleSpec | NetShuffleSpec,
    snapshot: PartitionedSnapshot,
    progress: Mapping[str, SplitProgress],
    stager: ChunkStager | None,
    delivery: PartitionDelivery,
) -> bool:
    """Deliver outputs [spec.first_output, spec.outputs) in order; False when a stop request interrupted it.

    ConfigError when the snapshot was partly delivered cut otherwise (other identifier columns,
    carry-over rule or partition count): its remaining rows cannot be cut to match. A `NetShuffleSpec`
    is a whole batch's net fold in partitions (reader/changes/net_shuffle.py), anchored at its first split.
    """
    stored = progress[snapshot.anchor.split_id].parts_key
    if stored is not None and stored != spec.fingerprint:
        net = isinstance(spec, NetShuffleSpec)
        what = "the net changes" if net else f"snapshot {snapshot.snapshot_id}"
        settings = "--identifier-columns" if net else "--identifier-columns, --keep-carry-over"
        raise ConfigError(
            f"{what} of batch {delivery.batch_id} was partly delivered in partitions cut as "
            f"{stored}, but this run cuts them as {spec.fingerprint}: run with the settings ({settings}) "
            "and the icetail release that began the batch"
        )
    slot = SplitSlot(delivery.consumer, delivery.batch_id, snapshot.indexes[0])
    next_rows: dict[str, int] = {}

    def heartbeat() -> bool:
        delivery.renew()
        return not delivery.stopped()

    outputs = (
        net_outputs(spark, context, spec, heartbeat=heartbeat)
        if isinstance(spec, NetShuffleSpec)
        else shuffled_outputs(spark, context, spec, stager=stager, heartbeat=heartbeat)
    )
    delivered = spec.first_output
    for output in outputs:
        for chunk in output.read:
            next_rows[chunk.split_id] = max(next_rows.get(chunk.split_id, 0), chunk.next_row_exclusive)
            delivery.on_read(chunk)
        delivery.before_write("partition's sink write")
        token = _written(delivery.sink, slot.chunk_key(snapshot.anchor.split_id, output.index), output)
        last = output.index == spec.outputs - 1
        delivery.before_write("partition's offset commit")
        delivery.store.commit_chunks(
            delivery.consumer,
            delivery.batch_id,
            _commits(snapshot, progress, output, token, next_rows if last else None, spec.fingerprint),
            owner=delivery.owner,
        )
        delivered = output.index + 1
        delivery.on_delivered(output.change_counts)
        delivery.after_commit()
        if not last and delivery.stopped():
            return False
    return delivered == spec.outputs  # fewer: a stop request cancelled the job


def _written(sink: Sink, key: Any, output: ShuffleOutput) -> str | None:
    if output.staged is not None:
        return cast(StagingSink, sink).commit_staged(key, output.staged)
    rows = output.rows()
    return sink.write(key, rows) if rows is not None and rows.num_rows else None


def _commits(
    snapshot: PartitionedSnapshot,
    progress: Mapping[str, SplitProgress],
    output: ShuffleOutput,
    token: str | None,
    next_rows: Mapping[str, int] | None,
    key: str,
) -> list[ChunkCommit]:
    """Output i's commit: the anchor's `parts_done = i + 1`; for the last, every split done too."""
    anchor = snapshot.anchor.split_id
    stored = progress[anchor].next_row_exclusive or 0
    if next_rows is None:
        return [ChunkCommit(anchor, stored, output.row_count, False, token, output.index + 1, key)]
    return [
        ChunkCommit(
            split.split_id,
            max(next_rows.get(split.split_id, 0), progress[split.split_id].next_row_exclusive or 0),
            output.row_count if split.split_id == anchor else 0,
            True,
            token if split.split_id == anchor else None,
            parts_done=output.index + 1 if split.split_id == anchor else None,
            parts_key=key if split.split_id == anchor else None,
        )
        for split in snapshot.splits
        if not progress[split.split_id].done
    ]
