"""JSON lines: one object per change row, to a file or to stdout. At least once.

Values are encoded as `icetail.sinks.files.jsonl_encoding` says (strict JSON, nothing lost). A chunk
is appended, then flushed (and fsynced for files). These sinks cannot take back lines, so a
chunk replayed after a crash between the sink write and the offset commit is appended a second
time: `exactly_once = False`. Consumers that need exactly once can drop repeated chunks
themselves, or use the parquet or iceberg sink.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, error_text
from icetail.kernel.names import check_consumer_id
from icetail.sinks.base import ChunkKey
from icetail.sinks.files.jsonl_encoding import jsonl_buffers, write_jsonl_to
from icetail.sinks.files.parquet import fsync_dir


class JsonlFileSink:
    """Appends one JSON line per change row to a file; flush + fsync per chunk; at least once.

    On open, a torn last line (a crash in the middle of a chunk, which was then not committed
    and will be written again) is cut off, so the file holds whole lines only.
    """

    exactly_once: bool = False

    def __init__(self, path: str | os.PathLike[str], *, consumer: str) -> None:
        self.path = Path(os.path.abspath(path))
        self.consumer = check_consumer_id(consumer)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            existed = self.path.exists()
            self._file = open(self.path, "ab")  # held open until close()
            if not existed:
                fsync_dir(self.path.parent)
            self.torn_bytes_removed = _cut_torn_tail(self._file)
        except OSError as exc:
            raise ConfigError(f"jsonl sink file {str(self.path)!r} is not usable: {error_text(exc)}") from exc

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        if self._file.closed:
            raise SinkRejectedError(f"jsonl sink {str(self.path)!r} is closed")
        self._file.flush()  # empty after a successful write: the chunk starts at the end of the file
        start = self._file.tell()
        try:
            for buffer in jsonl_buffers(rows):
                self._file.write(buffer)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            where = str(self.path)
            self._take_back(start)
            raise SinkError(f"jsonl sink: appending chunk {key.name} to {where!r} failed: {error_text(exc)}") from exc
        return None

    def _take_back(self, start: int) -> None:
        """Cut what a failed append wrote (a torn line) and drop what it left buffered, so that a retry
        in this process appends after whole lines (a full disk: chaos harness, issue 26). The file
        is reopened; if even that fails, the next write says so and a new run cuts the torn tail."""
        with contextlib.suppress(OSError):
            self._file.close()  # its flush fails again; the descriptor is closed regardless
        with contextlib.suppress(OSError):
            os.truncate(self.path, start)
        with contextlib.suppress(OSError):
            self._file = open(self.path, "ab")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class StdoutSink:
    """JSON lines to standard output (or `stream`), flushed per chunk; at least once."""

    exactly_once: bool = False

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._closed = False

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        if self._closed:
            raise SinkRejectedError("stdout sink is closed")
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            write_jsonl_to(stream, rows)
        except BrokenPipeError as exc:
            raise SinkRejectedError(f"stdout sink: the reader of stdout went away (chunk {key.name})") from exc
        except OSError as exc:
            raise SinkError(f"stdout sink: writing chunk {key.name} failed: {error_text(exc)}") from exc
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _cut_torn_tail(f: Any) -> int:
    """Truncate an append-mode binary file after its last newline; return the bytes removed."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return 0
    with open(f.name, "rb") as r:
        r.seek(size - 1)
        if r.read(1) == b"\n":
            return 0
        pos = size
        block = 64 * 1024
        while pos > 0:
            start = max(0, pos - block)
            r.seek(start)
            chunk = r.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        else:
            keep = 0
    f.truncate(keep)
    f.flush()
    os.fsync(f.fileno())
    return size - keep
