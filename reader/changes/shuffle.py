"""One snapshot reconciled in partitions, one Spark task each, instead of whole in the driver.

The rows that can cancel or pair are co-located by a stable hash (reader/changes/stable_hash.py):
- without row lineage, carry-over cancellation is by whole-row content and identical rows have
  identical identifier values, so one shuffle by the identifier columns (the data columns when
  there are none) co-locates both rules;
- with row lineage (v3), phase 1 is partitioned by `_row_id` and settles the lineage pairs
  (reconcile.settle_by_lineage); the rows it leaves are shuffled again, by identifiers or
  content, and phase 2 applies the other rules to them. Outputs [0, P) are phase 1's settled
  rows, [P, 2P) phase 2's.
Read tasks send (partition, (sort key, kind, payload)) records through an RDD `partitionBy`
with the identity as partitioner, so no Iceberg type becomes a Spark type (the tasks:
reader/changes/shuffle_tasks.py). Each output task puts its rows in plan order (a hidden column carries
each row's place), so a replay computes the same rows for the same output; it then stages them
through the sink's stager or returns them. Output `first_output` also carries every read
chunk's metadata (counts, offsets), for the driver's `--verify` and tallies. A task's read
error travels the same way and is raised by the driver before any output of the snapshot is
delivered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from icetail.reader.changes.shuffle_tasks import output_task, read_task, settle_task
from icetail.reader.changes.stable_hash import PARTITION_HASH_VERSION
from icetail.reader.spark.payloads import SplitRequest, TaskErrorPayload, raise_task_error
from icetail.reader.spark.session import current_scheduler_pool, use_scheduler_pool
from icetail.reader.spark.waves import group_for_tasks, job_result
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkStager, SplitSlot


@dataclass(frozen=True)
class ShuffleSpec:
    """One snapshot's shuffled reconciliation: everything its tasks need, all of it picklable."""

    requests: tuple[SplitRequest, ...]  # the snapshot's splits, each read from its first row
    split_indexes: tuple[int, ...]  # each request's position in its batch: the rows' sort key
    partitions: int  # P, per phase
    key_columns: tuple[str, ...]  # hashed for content and identifier rules (phase 2 with lineage)
    read_schema: pa.Schema  # the rows as read (with the lineage columns when pairing reads them)
    identifiers: tuple[str, ...]
    carry_over_removal: bool
    lineage_pairing: bool  # two phases: by `_row_id`, then by `key_columns`
    with_row_lineage: bool  # the output keeps the lineage columns
    first_output: int = 0  # outputs below this were delivered before (inclusive bound of what runs)
    chunk_rows: int | None = None
    stage_as: SplitSlot | None = None  # with a stager: output i is staged as chunk_key(anchor_split_id, i)
    anchor_split_id: str = ""

    @property
    def outputs(self) -> int:
        """Output partitions: P, or 2P with lineage pairing."""
        return 2 * self.partitions if self.lineage_pairing else self.partitions

    @property
    def fingerprint(self) -> str:
        """What decides which rows each output holds: a resumed snapshot must be cut the same way."""
        rules = f"carry-over={int(self.carry_over_removal)};lineage={int(self.lineage_pairing)}"
        return f"h{PARTITION_HASH_VERSION};p{self.partitions};{rules};keys={','.join(self.key_columns)}"


@dataclass(frozen=True)
class ShuffleOutput:
    """What output partition `index` delivers: rows (IPC bytes), or where its task staged them."""

    index: int
    data: bytes  # Arrow IPC stream of the reconciled rows; empty when staged or without rows
    staged: str | None
    change_counts: tuple[tuple[str, int], ...]
    read: tuple[Chunk, ...] = ()  # every read chunk's metadata (batch None), on output `first_output` only
    error: TaskErrorPayload | None = None
    not_exact: str | None = None  # a partitioned net fold that would differ from the driver's: why

    @property
    def row_count(self) -> int:
        return sum(count for _, count in self.change_counts)

    def rows(self) -> pa.Table | None:
        """The rows carried back (None when staged or empty)."""
        return pa.ipc.open_stream(self.data).read_all() if self.data else None


def shuffled_outputs(
    spark: Any,
    context: ReadContext,
    spec: ShuffleSpec,
    *,
    stager: ChunkStager | None = None,
    wave_outputs: int | None = None,
    heartbeat: Callable[[], bool] | None = None,
) -> Iterator[ShuffleOutput]:
    """Outputs [spec.first_output, spec.outputs) in index order; a task's read error raises first.

    Outputs run in waves of `wave_outputs` Spark tasks (all at once when staged: only metadata
    comes back), so at most a wave of reconciled rows is held in the driver. While a wave runs,
    `heartbeat` is called every few seconds (to renew a lease); when it returns False the job is
    cancelled and the outputs end early.
    """
    sc = spark.sparkContext
    parallelism = int(sc.defaultParallelism)
    task_items = read_task_runs(spec.requests, spec.split_indexes, max(2 * parallelism, spec.partitions))
    rdd = sc.parallelize(task_items, max(1, len(task_items)))
    shuffled = rdd.mapPartitions(lambda part: read_task(context, spec, part)).partitionBy(spec.partitions, _identity)
    if spec.lineage_pairing:
        shuffled = shuffled.mapPartitionsWithIndex(lambda p, part: settle_task(spec, p, part)).partitionBy(
            spec.outputs, _identity
        )
    outputs = shuffled.mapPartitionsWithIndex(lambda i, part: output_task(spec, stager, i, part))
    wave = max(1, spec.outputs if stager is not None else (wave_outputs or 2 * parallelism))
    yield from output_waves(spark, outputs, range(spec.first_output, spec.outputs), wave, heartbeat)


def output_waves(
    spark: Any,
    outputs: Any,
    indexes: range,
    wave: int,
    heartbeat: Callable[[], bool] | None = None,
) -> Iterator[ShuffleOutput]:
    """The `outputs` RDD's partitions `indexes` in index order, run `wave` Spark tasks at a time.

    A task's read error raises before any output of its wave is yielded. While a wave runs,
    `heartbeat` is called every few seconds; when it returns False the job is cancelled and the
    outputs end early.
    """
    sc = spark.sparkContext
    pool_name = current_scheduler_pool()  # the job runs on a thread of its own: read the pool here
    group = f"icetail-shuffle-{uuid.uuid4().hex[:12]}"
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="icetail-shuffle")
    finished = False
    try:

        def run(chosen: list[int]) -> list[ShuffleOutput]:
            sc.setJobGroup(group, "icetail shuffled reconciliation", interruptOnCancel=True)  # per thread
            use_scheduler_pool(sc, pool_name)
            return list(sc.runJob(outputs, lambda part: part, chosen))

        for start in range(indexes.start, indexes.stop, wave):
            job = pool.submit(run, list(range(start, min(start + wave, indexes.stop))))
            while not _finished(job, HEARTBEAT_SECONDS):
                if heartbeat is not None and not heartbeat():
                    return
            results = sorted(job_result(job), key=_by_index)  # a full local disk: one line
            for result in results:
                if result.error is not None:
                    raise_task_error(result.error)
            yield from results
        finished = True
    finally:
        if not finished:
            sc.cancelJobGroup(group)
        pool.shutdown(wait=True, cancel_futures=True)


HEARTBEAT_SECONDS = 5.0


def _finished(job: Future[Any], seconds: float) -> bool:
    done, _ = wait([job], timeout=seconds)
    return bool(done)


def read_task_runs(
    requests: tuple[SplitRequest, ...], split_indexes: tuple[int, ...], max_tasks: int
) -> list[list[tuple[int, SplitRequest]]]:
    """The splits as contiguous runs of about equal bytes, each with its split index."""
    tasks: list[list[tuple[int, SplitRequest]]] = []
    position = 0
    for run in group_for_tasks(requests, max_tasks):
        tasks.append(list(zip(split_indexes[position : position + len(run)], run, strict=True)))
        position += len(run)
    return tasks


def _by_index(output: ShuffleOutput) -> int:
    return output.index


def _identity(key: int) -> int:
    return key


identity_partitioner = _identity  # records carry their partition: `partitionBy(n, identity_partitioner)`
