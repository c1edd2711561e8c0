"""A directory of Parquet files, one per chunk, that appear only once committed.

Layout of the sink directory `DIR`:

* `DIR/<key.name>.parquet` - one committed chunk. The name sorts in delivery order.
* `DIR/_tmp/<consumer>/<key.name>.parquet` - a chunk being written (fsynced, then renamed with
  `os.replace` onto its final name, then the directory is fsynced).

A replayed chunk (same key, same rows) is written again and replaces its own file, so a crash
between the sink write and the offset commit cannot duplicate rows: exactly once. Readers such
as `pyarrow.dataset` and Spark skip `_`-prefixed paths, so they only ever see whole, committed
files. On open, the leftovers of this consumer's interrupted writes under `_tmp` are removed.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, error_text
from icetail.kernel.names import check_consumer_id, path_inside
from icetail.sinks.base import ChunkKey

TMP_DIR = "_tmp"
SUFFIX = ".parquet"


class ParquetDirSink:
    """Writes each chunk to `directory/<key.name>.parquet`, atomically and idempotently."""

    exactly_once: bool = True

    def __init__(self, directory: str | os.PathLike[str], *, consumer: str) -> None:
        self.directory = Path(os.path.abspath(directory))
        self.consumer = consumer
        self._where = str(self.directory)
        # a consumer id is one plain name (kernel/names.py): `_tmp/<consumer>` is this consumer's alone
        self._tmp = path_inside(self.directory / TMP_DIR, check_consumer_id(consumer))
        self._closed = False
        try:
            self._tmp.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.directory)
            self.stale_removed = self._remove_stale()
        except OSError as exc:
            raise ConfigError(f"parquet sink directory {self._where!r} is not usable: {error_text(exc)}") from exc

    def write(self, key: ChunkKey, rows: pa.Table) -> str:
        """Write `rows` to `<key.name>.parquet`; return that file name (the token)."""
        if self._closed:
            raise SinkRejectedError(f"parquet sink {self._where!r} is closed")
        if key.consumer != self.consumer:
            raise ConfigError(f"parquet sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}")
        name = key.name + SUFFIX
        tmp, final = path_inside(self._tmp, name), path_inside(self.directory, name)
        try:
            pq.write_table(rows, str(tmp))
            _fsync_file(tmp)
            os.replace(tmp, final)
            fsync_dir(self.directory)
        except (OSError, MemoryError) as exc:  # a full disk, a lost mount: worth retrying
            _discard(tmp)
            raise SinkError(f"parquet sink: writing {name} to {self._where!r} failed: {error_text(exc)}") from exc
        except pa.ArrowException as exc:  # the rows cannot be stored as parquet at all
            _discard(tmp)
            raise SinkRejectedError(f"parquet sink: chunk {name} cannot be written: {error_text(exc)}") from exc
        return name

    def stager(self, schema: pa.Schema | None = None) -> ParquetStager:
        """Every batch is staged (a chunk's file carries its own schema)."""
        return ParquetStager(str(self._tmp), str(self.directory))

    def commit_staged(self, key: ChunkKey, staged: str) -> str:
        """Rename a chunk written by a Spark task into place (a replay renames the same name again)."""
        if self._closed:
            raise SinkRejectedError(f"parquet sink {self._where!r} is closed")
        name = key.name + SUFFIX
        if Path(staged) != path_inside(self._tmp, name):
            raise SinkRejectedError(f"parquet sink: staged file {staged} is not chunk {name} of {self._tmp}")
        try:
            os.replace(staged, path_inside(self.directory, name))
            fsync_dir(self.directory)
        except OSError as exc:
            raise SinkError(f"parquet sink: committing {name} in {self._where!r} failed: {error_text(exc)}") from exc
        return name

    def close(self) -> None:
        """Also drop chunks Spark tasks staged but the run did not commit (a stop mid-batch)."""
        if not self._closed:
            with contextlib.suppress(OSError):
                self._remove_stale()
        self._closed = True

    def _remove_stale(self) -> int:
        removed = 0
        for path in self._tmp.iterdir():
            if path.is_file() and path.name.endswith(SUFFIX):
                path.unlink(missing_ok=True)
                removed += 1
        if removed:
            fsync_dir(self._tmp)
        return removed


@dataclass(frozen=True)
class ParquetStager:
    """Runs in Spark tasks: writes a chunk under `_tmp/<consumer>/`, fsynced, invisible to readers.

    The staging directory must be reachable from the executors (local mode, or a shared mount).
    """

    tmp_dir: str
    directory: str

    def stage(self, key: ChunkKey, rows: pa.Table) -> str:
        path = path_inside(self.tmp_dir, key.name + SUFFIX)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, str(path))
            _fsync_file(path)
        except (OSError, MemoryError) as exc:
            _discard(path)
            raise SinkError(
                f"parquet sink: staging {path.name} in {self.directory!r} failed: {error_text(exc)}"
            ) from exc
        except pa.ArrowException as exc:
            _discard(path)
            raise SinkRejectedError(f"parquet sink: chunk {path.name} cannot be written: {error_text(exc)}") from exc
        return str(path)


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make renames and new entries in `path` durable (a no-op where directories cannot be opened)."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
