"""The in-process engine: a small range's splits read in the calling process, with no JVM.

A Spark task and this engine run the same per-split function (`split_chunks` in
reader/spark/tasks.py: the split reader with its deletes applied), and a failed split ends in
the same IcetailError by class (`task_error`, then `raise_task_error`), so the chunks, their
order and the errors are those of `run_splits`. What costs is what Spark adds around a task:
the JVM's start (seconds), a job per wave and the rows' trip back to the driver. For a range of
a few MB that is all the time; this engine pays none of it. Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from icetail.reader.spark.payloads import SplitRequest, raise_task_error, task_error
from icetail.reader.spark.tasks import TASK_ERRORS, split_chunks
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkStager


def run_splits_in_process(
    context: ReadContext,
    requests: Sequence[SplitRequest],
    chunk_rows: int | None = None,
    *,
    stager: ChunkStager | None = None,
) -> Iterator[Chunk]:
    """Chunks of every split, in request order then file order: the order `run_splits` yields.

    Lazy: a split is read when the caller asks for its first chunk, so a caller that stops
    early reads no further.
    """
    for request in requests:
        try:
            yield from split_chunks(context, request, chunk_rows, stager)
        except TASK_ERRORS as exc:
            raise_task_error(task_error(exc, request))
