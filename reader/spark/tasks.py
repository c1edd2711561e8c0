"""The task side: what a Spark task runs for its splits, and what it sends back."""

from __future__ import annotations

import pickle
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa

from icetail.kernel.errors import IcetailError
from icetail.reader.spark.payloads import Payload, SplitRequest, encode, task_error
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk, read_split
from icetail.sinks.base import ChunkStager, SplitSlot


def connect_wave_job(
    spark: Any,
    groups: list[list[SplitRequest]],
    context: ReadContext,
    chunk_rows: int | None,
    stager: ChunkStager | None,
) -> Any:
    """The wave as a DataFrame job for Spark Connect, which has no RDDs.

    Task i of `range(n)` runs `groups[i]` in `mapInArrow` and returns each chunk payload
    pickled in one binary row; partitions come back in order, so the wave's order holds.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task_index in batch.column(0).to_pylist():
                for payload in run_partition(context, [groups[task_index]], chunk_rows, stager, None):
                    yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(payload)], pa.binary())], ["payload"])

    return spark.range(0, len(groups), 1, len(groups)).mapInArrow(run, "payload binary")


def run_partition(
    context: ReadContext, part: Any, chunk_rows: int | None, stager: ChunkStager | None, handoff: str | None
) -> Iterator[Payload]:
    for group in part:
        for request in group:
            error = yield from _run_split(context, request, chunk_rows, stager, handoff)
            if error:
                return


def _run_split(
    context: ReadContext,
    request: SplitRequest,
    chunk_rows: int | None,
    stager: ChunkStager | None,
    handoff: str | None,
) -> Generator[Payload, None, bool]:
    """Yields the split's chunk payloads; returns True after yielding an error (the task stops)."""
    try:
        for chunk in split_chunks(context, request, chunk_rows, stager):
            yield encode(chunk, handoff)
    except TASK_ERRORS as exc:
        yield task_error(exc, request)
        return True
    return False


# what a task hands the driver as an IcetailError by class (payloads.task_error); anything else is a bug
TASK_ERRORS = (IcetailError, OSError, pa.ArrowException)


def split_chunks(
    context: ReadContext,
    request: SplitRequest,
    chunk_rows: int | None,
    stager: ChunkStager | None,
    *,
    arrow_threads: bool = False,
) -> Iterator[Chunk]:
    """The per-split work of a task: the split read with its deletes applied, staged if asked.

    A Spark task encodes each chunk for the driver; the in-process engine (reader/local.py)
    runs this same function in the calling process, with `arrow_threads` (read_split), and keeps
    the chunks as they are.
    """
    for chunk in read_split(
        context,
        request.split,
        start_row_inclusive=request.start_row_inclusive,
        chunk_rows=chunk_rows,
        with_row_lineage=request.with_row_lineage,
        arrow_threads=arrow_threads,
    ):
        if stager is not None and request.stage_as is not None:
            chunk = _staged(stager, request.stage_as, chunk)
        yield chunk


def _staged(stager: ChunkStager, stage_as: SplitSlot, chunk: Chunk) -> Chunk:
    """Write the chunk's rows from this task; only where they went and their counts travel on."""
    if chunk.batch is None or chunk.batch.num_rows == 0:
        return chunk
    key = stage_as.chunk_key(chunk.split_id, chunk.row_start_inclusive)
    rows = pa.Table.from_batches([chunk.batch])
    # read_split counted the rows per change type already: they travel on in `change_counts`
    return replace(chunk, batch=None, staged=stager.stage(key, rows))
