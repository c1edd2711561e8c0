"""One snapshot reconciled in partitions, one Spark task each, instead of whole in the driver.

The rows that can cancel or pair are co-located by a stable hash (reader/stable_hash.py):
- without row lineage, carry-over cancellation is by whole-row content and identical rows have
  identical identifier values, so one shuffle by the identifier columns (the data columns when
  there are none) co-locates both rules;
- with row lineage (v3), phase 1 is partitioned by `_row_id` and settles the lineage pairs
  (reconcile.settle_by_lineage); the rows it leaves are shuffled again, by identifiers or
  content, and phase 2 applies the other rules to them. Outputs [0, P) are phase 1's settled
  rows, [P, 2P) phase 2's.
Read tasks send (partition, (sort key, kind, payload)) records through an RDD `partitionBy`
with the identity as partitioner, so no Iceberg type becomes a Spark type. Each output task
sorts its records by (split index, chunk row), which is the plan order, so a replay computes
the same rows for the same output; it then stages them through the sink's stager or returns
them. Output `first_output` also carries every read chunk's metadata (counts, offsets), for the
driver's `--verify` and tallies. A task's read error travels the same way and is raised by the
driver before any output of the snapshot is delivered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import IcetailError
from icetail.reader.context import ReadContext
from icetail.reader.metadata_columns import CHANGE_TYPE
from icetail.reader.reconcile import HIDDEN_PREFIX, reconcile_snapshot, settle_by_lineage
from icetail.reader.row_lineage import ROW_ID, without_lineage
from icetail.reader.spark import SplitRequest, _ErrorPayload, group_for_tasks, raise_task_error, task_error
from icetail.reader.split_reader import Chunk, read_split
from icetail.reader.stable_hash import PARTITION_HASH_VERSION, hashable_columns, partition_of
from icetail.sinks.base import ChunkStager, SplitSlot

_ROWS, _META, _ERROR = "rows", "meta", "error"
# each row's place in the plan, carried through the shuffles: a partition is reconciled in plan
# order, as the driver would, so content cancellation keeps the same one of identical rows.
# (split index << 40) + the row's number among the split's change rows (< 2**40 of them)
ORDER_COLUMN = HIDDEN_PREFIX + "plan_order"
_SEQ_BITS = 40
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")  # rows cross the shuffle once, compressed
# Rows a read task decodes at a time: a row group can hold millions of rows (Java writes 128 MB
# ones), and nothing here is committed per chunk, so the cut changes neither rows nor their order.
READ_CHUNK_ROWS = 131_072
_Record = tuple[int, tuple[tuple[int, int], str, Any]]  # (partition, (sort key, kind, payload))


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
    error: _ErrorPayload | None = None

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
    wave = max(1, spec.outputs if stager is not None else (wave_outputs or 2 * parallelism))
    group = f"icetail-shuffle-{uuid.uuid4().hex[:12]}"
    task_items = _read_tasks(spec, max(2 * parallelism, spec.partitions))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="icetail-shuffle")
    finished = False
    try:
        rdd = sc.parallelize(task_items, max(1, len(task_items)))
        shuffled = rdd.mapPartitions(lambda part: _read_task(context, spec, part)).partitionBy(
            spec.partitions, _identity
        )
        if spec.lineage_pairing:
            shuffled = shuffled.mapPartitionsWithIndex(lambda p, part: _settle_task(spec, p, part)).partitionBy(
                spec.outputs, _identity
            )
        outputs = shuffled.mapPartitionsWithIndex(lambda i, part: _output_task(spec, stager, i, part))

        def run(indexes: list[int]) -> list[ShuffleOutput]:
            sc.setJobGroup(group, "icetail shuffled reconciliation", interruptOnCancel=True)  # per thread
            return list(sc.runJob(outputs, lambda part: part, indexes))

        for start in range(spec.first_output, spec.outputs, wave):
            job = pool.submit(run, list(range(start, min(start + wave, spec.outputs))))
            while not _finished(job, HEARTBEAT_SECONDS):
                if heartbeat is not None and not heartbeat():
                    return
            results = sorted(job.result(), key=_by_index)
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


def _read_tasks(spec: ShuffleSpec, max_tasks: int) -> list[list[tuple[int, SplitRequest]]]:
    """The snapshot's splits as contiguous runs of about equal bytes, each with its split index."""
    tasks: list[list[tuple[int, SplitRequest]]] = []
    position = 0
    for run in group_for_tasks(spec.requests, max_tasks):
        tasks.append(list(zip(spec.split_indexes[position : position + len(run)], run, strict=True)))
        position += len(run)
    return tasks


def _by_index(output: ShuffleOutput) -> int:
    return output.index


def _identity(key: int) -> int:
    return key


def _read_task(
    context: ReadContext, spec: ShuffleSpec, part: Iterable[list[tuple[int, SplitRequest]]]
) -> Iterator[_Record]:
    """Read the task's splits; each chunk's rows go to their phase-1 partitions, its metadata to
    the partition that carries it on (phase 1's 0 with lineage, else `first_output`)."""
    columns = _phase1_columns(spec)
    meta_to = 0 if spec.lineage_pairing else spec.first_output
    for task in part:
        for split_index, request in task:
            seq = 0  # change rows of the split before this chunk's
            try:
                for chunk in read_split(
                    context,
                    request.split,
                    chunk_rows=min(spec.chunk_rows or READ_CHUNK_ROWS, READ_CHUNK_ROWS),
                    with_row_lineage=request.with_row_lineage,
                ):
                    key = (split_index, chunk.row_start_inclusive)
                    yield meta_to, (key, _META, replace(chunk, batch=None))
                    if chunk.batch is None or not chunk.batch.num_rows:
                        continue
                    rows = _with_order(pa.Table.from_batches([chunk.batch]), split_index, seq)
                    seq += rows.num_rows
                    for target, piece in _partitioned(rows, columns, spec.partitions):
                        if spec.lineage_pairing or target >= spec.first_output:
                            yield target, (key, _ROWS, _ipc(piece))
            except (IcetailError, OSError, pa.ArrowException) as exc:
                yield meta_to, ((split_index, -1), _ERROR, task_error(exc, request))
                return


def _settle_task(spec: ShuffleSpec, p1: int, part: Iterable[_Record]) -> Iterator[_Record]:
    """Phase 1 (lineage): settle the partition's `_row_id` pairs (they are output p1) and send the
    rest on to phase 2 by `key_columns` (outputs P + p2)."""
    rows, carried = _gathered(spec, part)
    for key, kind, payload in carried:
        yield spec.first_output, (key, kind, payload)
    settled, rest = settle_by_lineage(rows, spec.carry_over_removal)
    if p1 >= spec.first_output and settled.num_rows:
        yield p1, ((p1, 0), _ROWS, _ipc(settled))
    for target, piece in _partitioned(rest, hashable_columns(rest.schema, spec.key_columns), spec.partitions):
        if spec.partitions + target >= spec.first_output:
            yield spec.partitions + target, ((p1, 0), _ROWS, _ipc(piece))


def _output_task(
    spec: ShuffleSpec, stager: ChunkStager | None, index: int, part: Iterable[_Record]
) -> Iterator[ShuffleOutput]:
    """Reconcile (or, for phase 1's outputs, only pass on) the partition's rows, then stage or return them."""
    rows, carried = _gathered(spec, part)
    errors = [payload for _, kind, payload in carried if kind == _ERROR]
    read = tuple(payload for _, kind, payload in carried if kind == _META)
    if errors:
        yield ShuffleOutput(index, b"", None, (), read, errors[0])
        return
    if not (spec.lineage_pairing and index < spec.partitions):
        rows = reconcile_snapshot(rows, spec.identifiers or None, spec.carry_over_removal, row_lineage=False)
    rows = rows.drop_columns([ORDER_COLUMN])
    if not spec.with_row_lineage:
        rows = without_lineage(rows)
    counts = _counts(rows)
    if not rows.num_rows:
        yield ShuffleOutput(index, b"", None, counts, read)
    elif stager is not None and spec.stage_as is not None:
        staged = stager.stage(spec.stage_as.chunk_key(spec.anchor_split_id, index), rows)
        yield ShuffleOutput(index, b"", staged, counts, read)
    else:
        yield ShuffleOutput(index, _ipc(rows), None, counts, read)


def _gathered(spec: ShuffleSpec, part: Iterable[_Record]) -> tuple[pa.Table, list[tuple[tuple[int, int], str, Any]]]:
    """The partition's rows in plan order (sorted by their sort key), and its other records."""
    pieces: list[tuple[tuple[int, int], bytes]] = []
    carried: list[tuple[tuple[int, int], str, Any]] = []
    for _, (key, kind, payload) in part:
        if kind == _ROWS:
            pieces.append((key, payload))
        else:
            carried.append((key, kind, payload))
    pieces.sort(key=lambda piece: piece[0])
    carried.sort(key=lambda record: record[0])
    schema = _with_order_fields(spec.read_schema)
    tables = [pa.ipc.open_stream(data).read_all() for _, data in pieces]
    if not tables:
        return schema.empty_table(), carried
    rows = pa.concat_tables(tables)
    rows = rows if rows.schema == schema else rows.cast(schema)
    order = rows.column(ORDER_COLUMN).to_numpy()
    if len(order) > 1 and bool((order[1:] < order[:-1]).any()):  # pieces of read chunks come in plan order
        rows = rows.take(pa.array(np.argsort(order, kind="stable")))
    return rows, carried


def _with_order_fields(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field(ORDER_COLUMN, pa.int64(), nullable=False))


def _with_order(rows: pa.Table, split_index: int, first_seq: int) -> pa.Table:
    """`rows` with their place in the plan: (split index, change row of the split) in one int64."""
    n = rows.num_rows
    order = (np.int64(split_index) << np.int64(_SEQ_BITS)) + np.arange(first_seq, first_seq + n, dtype=np.int64)
    return rows.append_column(pa.field(ORDER_COLUMN, pa.int64(), nullable=False), pa.array(order))


def _phase1_columns(spec: ShuffleSpec) -> tuple[str, ...]:
    if spec.lineage_pairing:
        return (ROW_ID,)
    return hashable_columns(spec.read_schema, spec.key_columns)


def _partitioned(rows: pa.Table, columns: Sequence[str], partitions: int) -> Iterator[tuple[int, pa.Table]]:
    """(partition, its rows in their order) for every partition that has rows."""
    if not rows.num_rows:
        return
    targets = partition_of(rows, columns, partitions)
    order = np.argsort(targets, kind="stable")
    ordered = rows.take(pa.array(order))
    sorted_targets = targets[order]
    bounds = np.flatnonzero(np.diff(sorted_targets)) + 1
    starts = np.r_[0, bounds]
    ends = np.r_[bounds, len(order)]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield int(sorted_targets[start]), ordered.slice(start, end - start)


def _ipc(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema, options=_IPC) as writer:
        writer.write_table(rows)
    return bytes(sink.getvalue().to_pybytes())


def _counts(rows: pa.Table) -> tuple[tuple[str, int], ...]:
    if not rows.num_rows:
        return ()
    return tuple((str(c["values"]), int(c["counts"])) for c in pc.value_counts(rows.column(CHANGE_TYPE)).to_pylist())
