"""Hand each committed chunk to a Python function (the Python API's sink)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from icetail.kernel.errors import IcetailError, SinkError, SinkRejectedError, error_text
from icetail.sinks.base import ChunkKey

ChunkCallback = Callable[[ChunkKey, pa.Table], Any]


class CallbackSink:
    """Calls `fn(key, rows)` once per chunk, in delivery order.

    A chunk replayed after a crash (between the sink write and the offset commit) is passed to
    `fn` again with the same key and the same rows. Delivery is therefore at least once, unless
    `fn` is idempotent per `key` (it upserts by `key.name`, or records the keys it has seen
    transactionally with its own output): say so with `idempotent=True` and the sink reports
    `exactly_once = True`.

    If `fn` returns a string it is stored with the committed offset as the sink token. An
    exception from `fn` is a failed write: icetail errors pass through unchanged (raise a
    `icetail.kernel.errors.TerminalError` to stop the run), any other exception becomes a transient
    `SinkError` and the chunk is retried.
    """

    def __init__(self, fn: ChunkCallback, *, idempotent: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"CallbackSink needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.exactly_once: bool = idempotent
        self._closed = False

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        if self._closed:
            raise SinkRejectedError(f"callback sink {_name(self.fn)} is closed")
        try:
            result = self.fn(key, rows)
        except IcetailError:
            raise
        except Exception as exc:
            raise SinkError(f"callback {_name(self.fn)} failed on chunk {key.name}: {error_text(exc)}") from exc
        return result if isinstance(result, str) else None

    def close(self) -> None:
        self._closed = True


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
