"""Spark task side of a shuffled reconciliation (reader/changes/shuffle.py): records in, records out.

A record is (partition, (sort key, kind, payload)): a piece of a read chunk's rows (Arrow IPC,
lz4), a read chunk's metadata, or a read error. Rows carry their place in the plan in a hidden
column, so every partition is reconciled in plan order whatever order the shuffle brought them in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import IcetailError
from icetail.reader.changes.reconcile import HIDDEN_PREFIX, reconcile_snapshot, settle_by_lineage
from icetail.reader.changes.stable_hash import hashable_columns, partition_of
from icetail.reader.spark.payloads import SplitRequest, task_error
from icetail.reader.split.context import ReadContext
from icetail.reader.split.metadata_columns import CHANGE_TYPE
from icetail.reader.split.read import read_split
from icetail.reader.split.row_lineage import ROW_ID, without_lineage
from icetail.sinks.base import ChunkStager

if TYPE_CHECKING:
    from icetail.reader.changes.shuffle import ShuffleOutput, ShuffleSpec

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
K = TypeVar("K")  # a read record's sort key: (split, row) here, (stage, split, row) in the net fold


def read_task(
    context: ReadContext, spec: ShuffleSpec, part: Iterable[list[tuple[int, SplitRequest]]]
) -> Iterator[_Record]:
    """Read the task's splits; each chunk's rows go to their phase-1 partitions, its metadata to
    the partition that carries it on (phase 1's 0 with lineage, else `first_output`)."""
    columns = _phase1_columns(spec)

    def route(rows: pa.Table, key: tuple[int, int]) -> Iterator[_Record]:
        for target, piece in _partitioned(rows, columns, spec.partitions):
            if spec.lineage_pairing or target >= spec.first_output:
                yield target, (key, _ROWS, _ipc(piece))

    meta_to = 0 if spec.lineage_pairing else spec.first_output
    yield from read_in_plan_order(context, part, spec.chunk_rows, meta_to, lambda split, row: (split, row), route)


def read_in_plan_order(
    context: ReadContext,
    part: Iterable[list[tuple[int, SplitRequest]]],
    chunk_rows: int | None,
    meta_to: int,
    key_of: Callable[[int, int], K],
    route: Callable[[pa.Table, K], Iterator[tuple[int, tuple[K, str, Any]]]],
) -> Iterator[tuple[int, tuple[K, str, Any]]]:
    """A read task of a shuffle (this one's or the net fold's): each chunk's metadata to `meta_to`
    under `key_of(split index, first row)`, its change rows with their place in the plan to `route`.
    A read error (or one `route` raises) is one error record to `meta_to` and ends the task."""
    for task in part:
        for split_index, request in task:
            seq = 0  # change rows of the split before this chunk's
            try:
                for chunk in read_split(
                    context,
                    request.split,
                    chunk_rows=min(chunk_rows or READ_CHUNK_ROWS, READ_CHUNK_ROWS),
                    with_row_lineage=request.with_row_lineage,
                ):
                    key = key_of(split_index, chunk.row_start_inclusive)
                    yield meta_to, (key, _META, replace(chunk, batch=None))
                    if chunk.batch is None or not chunk.batch.num_rows:
                        continue
                    rows = _with_order(pa.Table.from_batches([chunk.batch]), split_index, seq)
                    seq += rows.num_rows
                    yield from route(rows, key)
            except (IcetailError, OSError, pa.ArrowException) as exc:
                yield meta_to, (key_of(split_index, -1), _ERROR, task_error(exc, request))
                return
    _release_memory()


def settle_task(spec: ShuffleSpec, p1: int, part: Iterable[_Record]) -> Iterator[_Record]:
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
    del rows, settled, rest
    _release_memory()


def output_task(
    spec: ShuffleSpec, stager: ChunkStager | None, index: int, part: Iterable[_Record]
) -> Iterator[ShuffleOutput]:
    """Reconcile (or, for phase 1's outputs, only pass on) the partition's rows, then stage or return them."""
    from icetail.reader.changes.shuffle import ShuffleOutput

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
    _release_memory()
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
    tables = []
    while pieces:  # each piece's bytes go as soon as its rows are decoded
        tables.append(pa.ipc.open_stream(pieces.pop(0)[1]).read_all())
    if not tables:
        return schema.empty_table(), carried
    rows = pa.concat_tables(tables)
    rows = rows if rows.schema == schema else rows.cast(schema)
    order = rows.column(ORDER_COLUMN).to_numpy()
    if len(order) > 1 and bool((order[1:] < order[:-1]).any()):  # pieces of read chunks come in plan order
        rows = rows.take(pa.array(np.argsort(order, kind="stable")))
    return rows, carried


def _release_memory() -> None:
    """Hand the task's freed Arrow memory back to the OS: a reused worker otherwise keeps its peak."""
    pa.default_memory_pool().release_unused()


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


# for the partitioned net fold's tasks (reader/changes/net_shuffle_tasks.py), which move rows the same way
with_order = _with_order
with_order_fields = _with_order_fields
partitioned_rows = _partitioned
ipc_bytes = _ipc
change_counts = _counts
release_memory = _release_memory
META_KIND, ERROR_KIND = _META, _ERROR  # the kinds of read_in_plan_order's metadata and error records
