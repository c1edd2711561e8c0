"""The in-process engine: a small range's splits read in the calling process, with no JVM.

A Spark task and this engine run the same per-split function (`split_chunks` in
reader/spark/tasks.py: the split reader with its deletes applied), and a failed split ends in
the same IcetailError by class (`task_error`, then `raise_task_error`), so the chunks, their
order and the errors are those of `run_splits`. What costs is what Spark adds around a task:
the JVM's start (seconds), a job per wave and the rows' trip back to the driver. For a range of
a few MB that is all the time; this engine pays none of it. Nothing here imports pyspark.
Splits are read on a few threads at once, as Spark's tasks are (reader/ordered_splits.py), and
each split's row groups are decoded on pyarrow's thread pool as well: a split that waits for room
in the read-ahead, the last split, or a batch of one split would otherwise leave cores idle
(R67: 0.90x -> 0.97x of a threaded raw read). `ICETAIL_LOCAL_THREADS=1` reads on one thread.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator, Mapping, Sequence

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import LOCAL_THREADS_ENV, MAX_LOCAL_THREADS
from icetail.reader.ordered_splits import OrderedSplitReader
from icetail.reader.spark.payloads import SplitRequest, raise_task_error, task_error
from icetail.reader.spark.tasks import TASK_ERRORS, split_chunks
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkStager

# the chunks read ahead of the caller hold less than this (plus two chunks): a few row groups
BUFFER_BYTES = 64 * 1024 * 1024


def run_splits_in_process(
    context: ReadContext,
    requests: Sequence[SplitRequest],
    chunk_rows: int | None = None,
    *,
    stager: ChunkStager | None = None,
) -> Iterator[Chunk]:
    """Chunks of every split, in request order then file order: the order `run_splits` yields.

    Lazy: nothing is read before the caller asks for the first chunk. Then up to `local_threads()`
    splits are read at once, ahead of the caller by less than BUFFER_BYTES of chunks plus two
    chunks, and one chunk being read per thread: that, not the range, bounds the memory. A caller
    that stops early (closes the iterator) stops the threads after the chunk each is reading.
    """
    threads = local_threads()
    if threads <= 1 or len(requests) <= 1:
        return _one_after_another(context, requests, chunk_rows, stager, arrow_threads=threads > 1)
    return split_reader(context, requests, chunk_rows, stager, threads, BUFFER_BYTES).chunks()


def split_reader(
    context: ReadContext,
    requests: Sequence[SplitRequest],
    chunk_rows: int | None,
    stager: ChunkStager | None,
    threads: int,
    buffer_bytes: int,
) -> OrderedSplitReader:
    """The reader of `run_splits_in_process` with its bounds given (tests look at its buffer)."""
    return OrderedSplitReader(
        lambda index: _split(context, requests[index], chunk_rows, stager, arrow_threads=threads > 1),
        len(requests),
        threads,
        buffer_bytes,
    )


def _one_after_another(
    context: ReadContext,
    requests: Sequence[SplitRequest],
    chunk_rows: int | None,
    stager: ChunkStager | None,
    *,
    arrow_threads: bool,
) -> Iterator[Chunk]:
    for request in requests:
        yield from _split(context, request, chunk_rows, stager, arrow_threads=arrow_threads)


def _split(
    context: ReadContext,
    request: SplitRequest,
    chunk_rows: int | None,
    stager: ChunkStager | None,
    *,
    arrow_threads: bool,
) -> Generator[Chunk, None, None]:
    """One split's chunks; its failure as the IcetailError a Spark task would have ended with."""
    try:
        yield from split_chunks(context, request, chunk_rows, stager, arrow_threads=arrow_threads)
    except TASK_ERRORS as exc:
        raise_task_error(task_error(exc, request))


def local_threads(environ: Mapping[str, str] | None = None) -> int:
    """ICETAIL_LOCAL_THREADS, else the CPUs this process may use (at most MAX_LOCAL_THREADS)."""
    text = (os.environ if environ is None else environ).get(LOCAL_THREADS_ENV, "").strip()
    if not text:
        return max(1, min(_cpus(), MAX_LOCAL_THREADS))
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{LOCAL_THREADS_ENV}={text!r} is not a number of threads >= 1 (1: one split at a time)")
    return int(text)


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)  # the CPUs a container or `taskset` leaves us
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
