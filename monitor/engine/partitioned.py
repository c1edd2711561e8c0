"""Delivery of a snapshot reconciled in partitions by Spark tasks (reader/changes/shuffle.py), a chunk each.

Which gathered snapshots are partitioned, and into how many partitions, is a pure function of
the batch as stored (its splits' estimated bytes and BatchShape.reconcile_partition_bytes), so
a resumed batch cuts the same partitions, and the rows of each come out of the same hash in
plan order: output i always holds the same rows. It is written under
`SplitSlot(consumer, batch, anchor index).chunk_key(anchor split, i)` (the anchor is the
snapshot's first split), then committed as the anchor's `parts_done = i + 1`; the last output's
commit also marks every split of the snapshot done, in the same transaction. A crash resumes at
the first output not committed: the splits are read again to rebuild the shuffle, and the
outputs below it are neither reconciled nor written again.

A `--net` batch over the same size is delivered the same way, as one "snapshot" of all its splits
anchored at its first (`net_partitioned`, `net_spec`): its outputs are the partitions of its net
fold (reader/changes/net_shuffle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pyarrow as pa

from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.release import snapshots_needing_reconcile
from icetail.reader.changes.net import net_key_columns
from icetail.reader.changes.net_shuffle import NetShuffleSpec, net_outputs
from icetail.reader.changes.reconcile import HIDDEN_PREFIX
from icetail.reader.changes.shuffle import ShuffleOutput, ShuffleSpec, shuffled_outputs
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.split.context import ReadContext
from icetail.reader.split.metadata_columns import METADATA_COLUMNS, SCHEMA_ID
from icetail.reader.split.read import Chunk
from icetail.reader.split.row_lineage import LINEAGE_COLUMNS
from icetail.sinks.base import ChunkStager, Sink, SplitSlot, StagingSink
from icetail.state.checkpoint import ChunkCommit, SplitProgress
from icetail.state.store import CheckpointStore

# estimated (compressed parquet) split bytes per partition: about 400k change rows of a table of 8
# narrow columns, ~350 MB peak in the Python worker that reconciles them (bench/RESULTS.md, R27)
T = TypeVar("T")
MAX_RECONCILE_PARTITIONS = 4096  # per phase; a bound on Spark tasks, not on snapshot size


def reconcile_partitions(splits: Iterable[ChangeSplit], partition_bytes: int | None) -> int:
    """How many partitions a gathered snapshot of `splits` is reconciled in; 1: whole, in the driver."""
    if not partition_bytes:
        return 1
    total = sum(max(s.estimated_bytes, 1) for s in splits)
    return max(1, min(MAX_RECONCILE_PARTITIONS, -(-total // partition_bytes)))


@dataclass(frozen=True)
class PartitionedSnapshot:
    """A gathered snapshot reconciled in `partitions` partitions (per phase)."""

    snapshot_id: int
    splits: tuple[ChangeSplit, ...]
    indexes: tuple[int, ...]  # each split's position in its batch
    partitions: int

    @property
    def anchor(self) -> ChangeSplit:
        return self.splits[0]


def partitioned_snapshots(
    splits: Sequence[ChangeSplit], gathered: Iterable[int], partition_bytes: int | None
) -> dict[int, PartitionedSnapshot]:
    """The batch's gathered snapshots too big to reconcile whole, by snapshot id."""
    wanted = set(gathered)
    members: dict[int, list[int]] = {}
    for index, split in enumerate(splits):
        snapshot_id = split.task.commit.snapshot_id
        if snapshot_id in wanted:
            members.setdefault(snapshot_id, []).append(index)
    found = {}
    for snapshot_id, indexes in members.items():
        own = tuple(splits[i] for i in indexes)
        partitions = reconcile_partitions(own, partition_bytes)
        if partitions > 1:
            found[snapshot_id] = PartitionedSnapshot(snapshot_id, own, tuple(indexes), partitions)
    return found


def segments_in_order(
    requests: list[SplitRequest],
    index_of: Mapping[str, int],
    partitioned: Iterable[PartitionedSnapshot],
    released_from: Callable[[list[SplitRequest]], Iterator[T]],
) -> Iterator[T | PartitionedSnapshot]:
    """What `requests` release (in plan order), with each partitioned snapshot in its place among
    them: the requests before it are read (one `released_from` call) and released first."""
    pending = list(requests)
    for snapshot in sorted(partitioned, key=lambda p: p.indexes[0]):
        before = [r for r in pending if index_of[r.split.split_id] < snapshot.indexes[0]]
        pending = pending[len(before) :]
        if before:
            yield from released_from(before)
        yield snapshot
    if pending:
        yield from released_from(pending)


def key_columns(read_schema: pa.Schema, identifiers: Sequence[str], *, net: bool = False) -> tuple[str, ...]:
    """What co-locates rows that may cancel or pair: the identifier columns, else every data column
    (for a net fold without `_schema_id`: a row inserted under one schema and deleted under the next
    is the same row there, reader/changes/net.py)."""
    if identifiers:
        return tuple(identifiers)
    ignored = set(METADATA_COLUMNS) | set(LINEAGE_COLUMNS) | ({SCHEMA_ID} if net else set())
    return tuple(n for n in read_schema.names if n not in ignored and not n.startswith(HIDDEN_PREFIX))


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


def partition_spec(
    snapshot: PartitionedSnapshot,
    *,
    first_output: int,
    read_schema: pa.Schema,
    identifiers: tuple[str, ...],
    carry_over_removal: bool,
    lineage_pairing: bool,
    with_row_lineage: bool,
    chunk_rows: int | None,
    stage_as: SplitSlot | None,
) -> ShuffleSpec:
    """The shuffle of `snapshot`, from output `first_output` (inclusive): a resumed snapshot starts
    after the outputs its anchor records as delivered."""
    reads_lineage = with_row_lineage or lineage_pairing
    return ShuffleSpec(
        requests=tuple(SplitRequest(s, 0, with_row_lineage=reads_lineage) for s in snapshot.splits),
        split_indexes=snapshot.indexes,
        partitions=snapshot.partitions,
        key_columns=key_columns(read_schema, identifiers),
        read_schema=read_schema,
        identifiers=identifiers,
        carry_over_removal=carry_over_removal,
        lineage_pairing=lineage_pairing,
        with_row_lineage=with_row_lineage,
        first_output=first_output,
        chunk_rows=chunk_rows,
        stage_as=stage_as,
        anchor_split_id=snapshot.anchor.split_id,
    )


def net_spec(
    batch: PartitionedSnapshot,
    *,
    first_output: int,
    read_schema: pa.Schema,
    identifiers: tuple[str, ...],
    row_lineage: bool,
    output_lineage: bool,
    chunk_rows: int | None,
) -> NetShuffleSpec:
    """The partitioned net fold of a whole batch or range (`batch`: all its splits), from output
    `first_output` (inclusive): a resumed batch starts after the outputs its first split records."""
    return NetShuffleSpec(
        requests=tuple(SplitRequest(s, 0, with_row_lineage=row_lineage or output_lineage) for s in batch.splits),
        split_indexes=batch.indexes,
        partitions=batch.partitions,
        read_schema=read_schema,
        key_columns=key_columns(read_schema, identifiers, net=True),
        pair_columns=net_key_columns(read_schema, identifiers),
        whole_snapshots=frozenset(snapshots_needing_reconcile(s.task for s in batch.splits)),
        row_lineage=row_lineage,
        output_lineage=output_lineage,
        first_output=first_output,
        chunk_rows=chunk_rows,
    )


def net_partitioned(splits: Sequence[ChangeSplit], partition_bytes: int | None) -> PartitionedSnapshot | None:
    """A net batch too big to fold in the driver, as one "snapshot" of all its splits; None: fold it there."""
    partitions = reconcile_partitions(splits, partition_bytes)
    if partitions < 2 or not splits:
        return None
    return PartitionedSnapshot(splits[0].task.commit.snapshot_id, tuple(splits), tuple(range(len(splits))), partitions)


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
