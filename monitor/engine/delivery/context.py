"""What every delivery path shares: where rows and offsets go, the run's hooks, a batch's counters.

`DeliveryContext` is made once, when the pipeline has opened its sink and bound a mirror's key
(choice.py), and serves every batch of the run; it holds no state of its own. `Tally` counts one
batch. `BatchToDeliver` is one batch written ahead, with what every path derives from it first.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from icetail.kernel import seams
from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.engine_choice import EngineChoice
from icetail.monitor.engine.mirror_key import keyed_by_row_id, mirror_key
from icetail.monitor.engine.partitioned import PartitionDelivery
from icetail.monitor.engine.verify import VerifyMode, report, verifier_for
from icetail.reader.changes.checks import SnapshotCheck, SnapshotVerifier
from icetail.reader.changes.read_setup import identifier_names, schema_id_of
from icetail.reader.changes.release import observed
from icetail.reader.split.metadata_columns import CHANGE_TYPE
from icetail.reader.split.read import Chunk
from icetail.sinks.base import Sink
from icetail.state.checkpoint import Inflight, InflightBatch, SplitProgress
from icetail.state.store import CheckpointStore


class Tally:
    """Mutable counters of one batch, frozen into a BatchOutcome at the end."""

    def __init__(self) -> None:
        self.rows: Counter[str] = Counter()
        self.chunks = 0
        self.bytes_read = 0
        self.row_groups = 0
        self.rows_decoded = 0
        self.deleted_rows = 0
        self.snapshots_checked = 0
        self.check_mismatches = 0

    def add_chunk(self, chunk: Chunk) -> None:
        self.bytes_read += chunk.bytes_read
        self.row_groups += chunk.row_groups_read
        self.rows_decoded += chunk.rows_decoded
        self.deleted_rows += chunk.deleted_rows

    def add_rows(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            self.add_counts(())
            return
        self.add_counts(
            tuple((str(c["values"]), int(c["counts"])) for c in pc.value_counts(rows.column(CHANGE_TYPE)).to_pylist())
        )

    def add_counts(self, counts: tuple[tuple[str, int], ...]) -> None:
        self.chunks += 1
        for change_type, count in counts:
            self.rows[change_type] += count


@dataclass(frozen=True)
class BatchToDeliver:
    """A batch written ahead (`inflight`: its splits and their progress), on `table`, projected onto
    `schema_id`, its updates paired by `identifiers`, its splits read by `engine` (a Spark task
    reconciles a partitioned snapshot whatever the engine: only a batch written for Spark has one)."""

    table: Table
    inflight: Inflight
    schema_id: int | None
    identifiers: tuple[str, ...]
    engine: EngineChoice

    @property
    def batch(self) -> InflightBatch:
        return self.inflight.batch

    def progress(self) -> dict[str, SplitProgress]:
        """Each split's progress, by split id."""
        return {p.split_id: p for p in self.inflight.progress}

    def splits(self) -> tuple[ChangeSplit, ...]:
        """The batch's splits, each with its commit's schema id."""
        return with_commit_schema_ids(self.table, self.batch.splits)


@dataclass(frozen=True)
class DeliveryContext:
    """Where a batch's rows and offsets go, and the run's hooks; the same for every batch of a run."""

    config: PipelineConfig
    sink: Sink
    store: CheckpointStore
    consumer: str
    owner: str  # the lease holder: every offset commit is fenced by it
    stop: threading.Event  # a stop request: finish the chunk (group) in progress, commit it, return
    renew_lease_if_due: Callable[[], None]
    # before every sink write and offset commit: the lease renewed when due, LeaseDeadlineError once
    # it may have expired (monitor/engine/lease_clock.py); the argument names the write, for the message
    before_write: Callable[[str], None]
    session: Callable[[], Any]  # the Spark session, for a batch on Spark (started, or waited for, when called)
    verify: VerifyMode
    sink_key: tuple[str, ...] | None = None  # a mirror's key (KeyedSink), bound at open
    on_chunk: Callable[[Chunk], None] | None = None
    on_check: Callable[[SnapshotCheck], None] | None = None

    @property
    def with_lineage(self) -> bool:
        """Whether delivered rows carry `_row_id`: asked for, or the key a mirror applies by."""
        return self.config.with_row_lineage or keyed_by_row_id(self.sink_key)

    def stopped(self) -> bool:
        return self.stop.is_set()

    def limit_reached(self, delivered_rows: int, bytes_read: int) -> bool:
        """Whether the batch has delivered --max-rows-per-batch change rows or read --max-bytes-per-batch
        bytes (each inclusive): it then ends at this chunk boundary and the next batch resumes it."""
        rows, read = self.config.max_rows_per_batch, self.config.max_bytes_per_batch
        return (rows is not None and delivered_rows >= rows) or (read is not None and bytes_read >= read)

    def identifiers(self, table: Table, schema_id: int | None) -> tuple[str, ...]:
        """What updates are paired by: a mirror's key, else --identifier-columns or the identifier fields."""
        if self.sink_key is not None:
            return mirror_key(table, schema_id, self.config.identifier_columns)
        return identifier_names(table, schema_id, self.config.identifier_columns)

    def committed(self) -> None:
        """After a chunk (group, partition) and its offset are committed: the lease renewed when due,
        then the test seam (kernel/seams.py), where a test may hold the batch while it is provably in
        progress instead of racing its end (until a stop is requested)."""
        self.renew_lease_if_due()
        seams.reached(seams.AFTER_CHUNK, self.stop.wait)

    def all_done(self) -> bool:
        """Whether every split of the batch in flight is committed done."""
        checkpoint = self.store.load(self.consumer)
        return checkpoint is not None and checkpoint.inflight is not None and not checkpoint.inflight.pending()

    def tallied(self, chunks: Iterator[Chunk], tally: Tally) -> Iterator[Chunk]:
        """The read chunks, each seen by the on_chunk hook and counted as read."""

        def seen(chunk: Chunk) -> None:
            if self.on_chunk is not None:
                self.on_chunk(chunk)
            tally.add_chunk(chunk)

        return observed(chunks, seen)

    def verifier(
        self, table: Table, batch: InflightBatch, fully_read_split_ids: set[str] | None = None
    ) -> SnapshotVerifier | None:
        """What checks the batch's snapshots (None under off); only those read whole here can be checked."""
        return verifier_for(
            self.verify,
            table.metadata,
            batch.splits,
            from_snapshot_exclusive=batch.from_snapshot_exclusive,
            collapsed=batch.shape.collapsed,
            fully_read_split_ids=fully_read_split_ids,
        )

    def checked(self, batch: InflightBatch, check: SnapshotCheck, tally: Tally) -> None:
        """Count, report and log a snapshot's check; under strict a mismatch raises SnapshotCheckError."""
        if check.rules:
            tally.snapshots_checked += 1
        tally.check_mismatches += len(check.mismatches)
        if self.on_check is not None:
            self.on_check(check)
        context = {"consumer": self.consumer, "table": self.config.table, "batch_id": batch.batch_id}
        report(check, self.verify, context)

    def partition_delivery(
        self, batch: InflightBatch, tally: Tally, verifier: SnapshotVerifier | None
    ) -> PartitionDelivery:
        """A partitioned snapshot's hooks: its read chunks are tallied and checked as read ones are."""

        def on_read(chunk: Chunk) -> None:
            if self.on_chunk is not None:
                self.on_chunk(chunk)
            tally.add_chunk(chunk)
            check = verifier.add(chunk) if verifier is not None else None
            if check is not None:
                self.checked(batch, check, tally)

        return PartitionDelivery(
            self.sink,
            self.store,
            self.consumer,
            self.owner,
            batch.batch_id,
            on_read,
            tally.add_counts,
            self.committed,
            self.stopped,
            self.renew_lease_if_due,
            self.before_write,
        )


def batch_schema_id(table: Table, batch: InflightBatch) -> int | None:
    """The schema a batch is projected onto: stored with it, or (written before store schema 6) its to-snapshot's."""
    if batch.shape.schema_id is not None:
        return batch.shape.schema_id
    return schema_id_of(table, batch.to_snapshot_inclusive)


def with_commit_schema_ids(table: Table, splits: tuple[ChangeSplit, ...]) -> tuple[ChangeSplit, ...]:
    """Splits persisted before split format 3 lack their commit's schema id (`_schema_id`): look it up."""
    if all(s.task.commit.schema_id is not None for s in splits):
        return splits
    filled = []
    for split in splits:
        commit = split.task.commit
        if commit.schema_id is None:
            commit = replace(commit, schema_id=schema_id_of(table, commit.snapshot_id))
            split = replace(split, task=replace(split.task, commit=commit))
        filled.append(split)
    return tuple(filled)
