"""Which engine reads a range: Spark, or this process (reader/local.py), and why, in one line.

A cold Spark costs seconds before the first row (the JVM, then the first Python task); a range of
a few MB reads in milliseconds. `auto` reads in this process when the plan reads at most
`local_max_bytes` (data and delete files), else on Spark; a session the caller gave is used,
and so is Spark Connect (SPARK_REMOTE): both are the caller's choice of where to read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeSplit
from icetail.kernel.settings import (
    DEFAULT_LOCAL_MAX_BYTES,
    DEFAULT_RECONCILE_PARTITION_BYTES,
    ENGINES,
    LOCAL_MAX_BYTES_ENV,
    check_choice,
)
from icetail.monitor.planning.summary_rules import summary_of
from icetail.reader.local import run_splits_in_process
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.spark.waves import run_splits
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkStager

LOCAL = "local"
SPARK = "spark"
AUTO = "auto"
# a snapshot that adds or removes any of these changes rows inside data files it does not name:
# those files are read too, which only the plan knows (the estimate takes the table's whole size)
_DELETE_FILE_KEYS = (
    "added-delete-files",
    "removed-delete-files",
    "added-position-delete-files",
    "added-equality-delete-files",
    "added-dvs",
    "removed-dvs",
)


@dataclass(frozen=True)
class EngineChoice:
    """The engine a range is read with (`local` or `spark`) and the reason, for `icetail plan`."""

    engine: str
    reason: str

    def read(
        self,
        session: Callable[[], Any],
        context: ReadContext,
        requests: Sequence[SplitRequest],
        chunk_rows: int | None,
        stager: ChunkStager | None = None,
    ) -> Iterator[Chunk]:
        """The chunks of `requests` in order, read here or by Spark tasks (`session()` is called only
        then); `stager`: the sink's task-side writer, run where the split is read."""
        if self.local:
            return run_splits_in_process(context, requests, chunk_rows, stager=stager)
        return run_splits(session(), context, requests, chunk_rows=chunk_rows, stager=stager)

    def reconcile_partition_bytes(self, given: int | None) -> int:
        """Spark reconciles a big snapshot in partitions of `given` bytes (None: the default); in this
        process every snapshot is reconciled whole (0): the range is small, and there is no Spark."""
        if self.local:
            return 0
        return DEFAULT_RECONCILE_PARTITION_BYTES if given is None else given

    @property
    def local(self) -> bool:
        return self.engine == LOCAL


def local_max_bytes(given: int | None, environ: Mapping[str, str] | None = None) -> int:
    """`given`, else ICETAIL_LOCAL_MAX_BYTES, else the default; a ConfigError for a bad value."""
    if given is None:
        text = (os.environ if environ is None else environ).get(LOCAL_MAX_BYTES_ENV, "").strip()
        given = _env_bytes(text) if text else DEFAULT_LOCAL_MAX_BYTES
    if given < 0:
        raise ConfigError(f"local max bytes must be >= 0, got {given}")
    return given


def _env_bytes(text: str) -> int:
    if not text.lstrip("-").isdigit():
        raise ConfigError(f"{LOCAL_MAX_BYTES_ENV}={text!r} is not a number of bytes")
    return int(text)


def planned_bytes(splits: Iterable[ChangeSplit]) -> int:
    """The bytes a plan reads: its splits' data (estimated) and each delete file it applies once."""
    data = 0
    deletes: dict[tuple[str, int | None], int] = {}
    for split in splits:
        data += split.estimated_bytes or split.task.data_file.file_size_in_bytes
        for delete in split.task.deletes_before + split.task.deletes_after:
            size = delete.content_size_in_bytes or delete.file_size_in_bytes
            deletes[(delete.path, delete.content_offset)] = size
    return data + sum(deletes.values())


def summary_bytes(table: Table, snapshot_ids: Iterable[int]) -> int | None:
    """A cheap estimate of what a range reads, from its snapshots' summaries (no manifest read).

    Added and removed files' sizes; a snapshot that changes delete files counts the table's whole
    size then (its deletes apply to files it does not name). None: a summary cannot tell.
    """
    total = 0
    for snapshot_id in snapshot_ids:
        summary = summary_of(table.metadata.snapshot_by_id(snapshot_id))
        if summary is None:
            return None
        if summary["operation"] == "replace":  # rewritten files, no row changes: nothing is read
            continue
        if any(int(summary.get(key, "0") or 0) for key in _DELETE_FILE_KEYS):
            whole = summary.get("total-files-size")
            if whole is None:
                return None
            total += int(whole)
            continue
        sizes = [summary.get(key) for key in ("added-files-size", "removed-files-size")]
        if all(size is None for size in sizes) and "total-files-size" not in summary:
            return None
        total += sum(int(size) for size in sizes if size is not None)
    return total


def choose_engine(engine: str, read_bytes: int | None, max_bytes: int, *, spark_given: bool) -> EngineChoice:
    """The engine for a range that reads `read_bytes` (None: not known yet, which means big)."""
    check_choice(engine, ENGINES, "engine")
    if engine == LOCAL:
        return EngineChoice(LOCAL, "--engine local")
    if engine == SPARK:
        return EngineChoice(SPARK, "--engine spark")
    if spark_given:
        return EngineChoice(SPARK, "a Spark session was given")
    if os.environ.get("SPARK_REMOTE"):
        return EngineChoice(SPARK, "SPARK_REMOTE names a Spark Connect server")
    if read_bytes is None:
        return EngineChoice(SPARK, "the snapshot summaries do not tell the range's size")
    if max_bytes and read_bytes <= max_bytes:  # 0: never in process
        return EngineChoice(LOCAL, f"reads {size_text(read_bytes)}, at most --local-max-bytes {size_text(max_bytes)}")
    return EngineChoice(SPARK, f"reads {size_text(read_bytes)}, more than --local-max-bytes {size_text(max_bytes)}")


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def engine_for_plan(
    engine: str, splits: Iterable[ChangeSplit], max_bytes: int | None, *, spark_given: bool
) -> EngineChoice:
    """The engine for a planned range (`max_bytes` None: ICETAIL_LOCAL_MAX_BYTES or the default)."""
    return choose_engine(engine, planned_bytes(splits), local_max_bytes(max_bytes), spark_given=spark_given)
