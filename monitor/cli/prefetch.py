"""Read ahead on a thread: the next change batches arrive while the current one is written.

`icetail changes --output` spent ~80% of its driver time inside the writer (parquet encoding,
JSON encoding), and the rest taking chunks out of the handoff, one after the other. Arrow's
writers release the GIL, so with the reading on a thread both proceed at once. At most
`depth` batches wait, so driver memory stays bounded whatever the snapshot's size.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()
_POLL_SECONDS = 0.1  # how often a blocked reader checks whether the consumer gave up


class Prefetched(Generic[T]):
    """Iterates `source` on a thread, `depth` items ahead; errors surface in the consumer, in order.

    Use it as a context manager: leaving early (an error while writing) stops the thread and
    closes `source` on it, which cancels its Spark job.
    """

    def __init__(self, source: Iterable[T], depth: int = 2) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source,), name="icetail-read-ahead", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item  # type: ignore[misc]

    def __enter__(self) -> Prefetched[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a reader waiting on a full queue
            try:
                self._queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                pass

    def _run(self, source: Iterable[T]) -> None:
        iterator = iter(source)
        try:
            for item in iterator:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(_Failure(exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error
