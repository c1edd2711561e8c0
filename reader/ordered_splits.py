"""Splits read on a few threads at once, their chunks handed to the caller in request order.

pyarrow releases the GIL while it decodes, so splits read on several threads go about as fast as
a threaded `pq.read_table` of the same files (reader/local.py also lets pyarrow decode a split's
columns on its own pool, which fills the cores a thread waiting for room leaves idle).
The caller still gets every chunk in the order one thread would give: split by split, each
split's chunks in file order, and a split's error at that split's place in the order.

Memory is bounded: at most `threads` splits are open (one per thread, each holding the chunk it
is reading), and the chunks read ahead of the caller hold less than `buffer_bytes` plus two
chunks (the one that crossed the bound, and the next one of the split the caller reads, which is
always let through so that a full buffer of later splits cannot stall the caller). A split is
started only when a thread is free, so at most `threads` splits are read ahead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from icetail.reader.split.read import Chunk

THREAD_NAME = "icetail-split-reader"


@dataclass
class _Split:
    """One split's chunks waiting for the caller (with their weights), and how its read ended."""

    waiting: deque[tuple[Chunk, int]] = field(default_factory=deque)
    done: bool = False
    error: BaseException | None = None


class OrderedSplitReader:
    """Chunks of `count` splits, `read(i)` being split i's chunks, read on up to `threads` threads.

    `chunks()` starts the threads on its first chunk and yields in order; closing it (or dropping
    it) stops the threads after the chunk each is reading, closes their splits and joins them.
    """

    def __init__(
        self, read: Callable[[int], Generator[Chunk, None, None]], count: int, threads: int, buffer_bytes: int
    ) -> None:
        self._read = read
        self._count = count
        self._threads = max(1, min(threads, count))
        self._limit = buffer_bytes
        self._splits = [_Split() for _ in range(count)]
        self._lock = threading.Condition()
        self._next = 0  # the next split a free thread starts
        self._head = 0  # the split the caller reads
        self._end = count  # no split after a failed one is started or buffered
        self._stopped = False
        self._buffered_bytes = 0
        self._buffered_chunks = 0
        self._waiting_threads = 0
        self._ended_threads = 0
        self.peak_buffered_chunks = 0  # what the bound allowed at most, for tests and diagnostics
        self.peak_buffered_bytes = 0

    @property
    def stalled(self) -> bool:
        """Every thread waits for room or has ended: nothing changes until the caller takes a chunk."""
        with self._lock:
            return self._waiting_threads + self._ended_threads == self._threads

    @property
    def started_splits(self) -> int:
        with self._lock:
            return self._next

    def chunks(self) -> Iterator[Chunk]:
        workers = [
            threading.Thread(target=self._work, name=f"{THREAD_NAME}-{i}", daemon=True) for i in range(self._threads)
        ]
        for worker in workers:
            worker.start()
        try:
            for index in range(self._count):
                while (chunk := self._take(index)) is not None:
                    yield chunk
        finally:
            with self._lock:
                self._stopped = True
                self._lock.notify_all()
            for worker in workers:
                if worker is not threading.current_thread():  # closed by a collection run on a worker
                    worker.join()
            self._splits = []

    def _take(self, index: int) -> Chunk | None:
        """Split `index`'s next chunk, waiting for it; None once the split is done; its error raised."""
        with self._lock:
            split = self._splits[index]
            while not split.waiting and not split.done:
                self._lock.wait()
            if split.waiting:
                chunk, weight = split.waiting.popleft()
                self._buffered_bytes -= weight
                self._buffered_chunks -= 1
                self._lock.notify_all()
                return chunk
            if split.error is not None:
                raise split.error
            self._head = index + 1
            self._lock.notify_all()
            return None

    def _work(self) -> None:
        try:
            while (index := self._start()) is not None:
                if not self._read_split(index):
                    return
        finally:
            with self._lock:
                self._ended_threads += 1
                self._lock.notify_all()

    def _start(self) -> int | None:
        with self._lock:
            if self._stopped or self._next >= self._end:
                return None
            self._next += 1
            return self._next - 1

    def _read_split(self, index: int) -> bool:
        """Read split `index` into its queue; False when the reader stopped meanwhile."""
        chunks = self._read(index)
        try:
            for chunk in chunks:
                if not self._put(index, chunk):
                    return False
        except Exception as exc:  # noqa: BLE001 - raised to the caller at this split's place in the order
            with self._lock:
                self._splits[index].error = exc
                self._splits[index].done = True
                self._end = min(self._end, index + 1)
                self._lock.notify_all()
            return True
        finally:
            chunks.close()
        with self._lock:
            self._splits[index].done = True
            self._lock.notify_all()
        return True

    def _put(self, index: int, chunk: Chunk) -> bool:
        """Queue `chunk` once there is room (the caller's split always has room for one)."""
        weight = chunk.batch.get_total_buffer_size() if chunk.batch is not None else 0
        with self._lock:
            split = self._splits[index]
            while not self._room(index, split):
                self._waiting_threads += 1
                self._lock.notify_all()  # `stalled` may have become true
                self._lock.wait()
                self._waiting_threads -= 1
            if self._stopped or index >= self._end:
                return False
            split.waiting.append((chunk, weight))
            self._buffered_bytes += weight
            self._buffered_chunks += 1
            self.peak_buffered_bytes = max(self.peak_buffered_bytes, self._buffered_bytes)
            self.peak_buffered_chunks = max(self.peak_buffered_chunks, self._buffered_chunks)
            self._lock.notify_all()
            return True

    def _room(self, index: int, split: _Split) -> bool:
        if self._stopped or index >= self._end:
            return True  # not for the chunk: the thread is to stop
        return self._buffered_bytes < self._limit or (index == self._head and not split.waiting)
