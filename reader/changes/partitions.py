"""How a snapshot too big to reconcile whole is cut into partitions, and a net batch too big to fold.

Which gathered snapshots are partitioned, and into how many partitions, is a pure function of
the batch as stored (its splits' estimated bytes and the partition size), so a resumed batch cuts
the same partitions, and the rows of each come out of the same hash in plan order: output i always
holds the same rows (shuffle.py, net_shuffle.py). A `--net` batch over the same size is cut the same
way, as one "snapshot" of all its splits anchored at its first (`net_partitioned`, `net_spec`). How
the outputs are written and committed, and how a crash resumes them: monitor/engine/partitioned.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from icetail.kernel.model import ChangeSplit
from icetail.reader.changes.net import net_key_columns
from icetail.reader.changes.net_shuffle import NetShuffleSpec
from icetail.reader.changes.reconcile import HIDDEN_PREFIX
from icetail.reader.changes.release import snapshots_needing_reconcile
from icetail.reader.changes.shuffle import ShuffleSpec
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.split.metadata_columns import METADATA_COLUMNS, SCHEMA_ID
from icetail.reader.split.row_lineage import LINEAGE_COLUMNS
from icetail.sinks.base import SplitSlot

T = TypeVar("T")
# the default partition size (kernel/settings.py), 8 MiB of estimated (compressed parquet) split bytes, is
# about 400k change rows of a table of 8 narrow columns, ~350 MB peak in the Python worker that
# reconciles them (bench/RESULTS.md, R27)
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
