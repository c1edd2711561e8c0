"""The Iceberg mirror's file rewrites in Spark tasks, and when to use them rather than the driver.

The driver plans which files a group must read (`iceberg/mirror/apply`); here one Spark job runs
`rewrite_file` over them, a few tasks per core, each a set of files of about equal bytes. Each task
gets the files' scan tasks (data file + delete files), the target's layout (its metadata without
history) and FileIO properties, and the affected keys as Arrow IPC bytes: all of it in the job's
Python function, which Spark ships once per job and executor (its task binary is a broadcast, and
PySpark broadcasts a function over `spark.broadcast.UDFCompressionThreshold` itself), not once per
task. A task reads its files, applies the transform and writes the rewrites into the target's data
location, and hands back the DataFiles its writer made and the counts; the driver commits them in
the one overwrite snapshot, as for the driver's own rewrites. The job is a DataFrame job
(`range(n).mapInArrow`), so a Spark Connect session runs it too.

A task's error (a data file gone, a write refused) travels back as the exception itself and is
raised in the driver in file order, so it becomes the same SinkError kind as in the driver; a
failure of the job itself (a worker lost) is a SinkError. Files written before the error stay
unreferenced, as the files of any commit that did not land (orphan-file removal collects them).

When: a Spark job costs tens of milliseconds (seconds on a loaded host) and a small file read and
written again in the driver a few, and on few cores the tasks gain little parallelism (R33: the
driver was faster up to 32 MB read on 2 shared cores), so a group whose files to read hold fewer
bytes than the target's `icetail.mirror.rewrite-task-bytes` (DEFAULT_TASK_BYTES; -1: never) is
rewritten in the driver, and so is every group when the mirror has no Spark session (used on its
own). Above it the tasks also keep the files' rows out of the driver's memory.
"""

from __future__ import annotations

import functools
import heapq
import importlib.util
import logging
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.io import load_file_io
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from icetail.kernel.errors import ConfigError, SinkError, error_text
from icetail.kernel.secrets import fileio_items, redacted_items
from icetail.sinks.iceberg.errors import REJECTED_ERRORS
from icetail.sinks.iceberg.mirror.files import (
    AffectedKeys,
    FileRewrite,
    FileTransform,
    GroupFiles,
    RewriteFiles,
    rewrite_file,
    rewrite_in_driver,
)

TASK_BYTES_PROPERTY = "icetail.mirror.rewrite-task-bytes"
# bytes of files to read from which a group's rewrite runs in Spark tasks: on 2 shared cores the
# driver was faster up to the 32 MB measured (R33); above, tasks keep the files' rows out of the driver
DEFAULT_TASK_BYTES = 64 * 1024 * 1024
TASKS_PER_CORE = 2  # a slow file does not leave the other cores idle for the rest of the job
_RESULT_SCHEMA = "file int, ok boolean, payload binary"

log = logging.getLogger("icetail.sinks.iceberg.mirror.sink")
SessionProvider = Callable[[], Any]  # the SparkSession to run tasks on, asked for when a group needs it


def task_bytes(properties: dict[str, str]) -> int:
    """The target's threshold (TASK_BYTES_PROPERTY), DEFAULT_TASK_BYTES when unset."""
    text = properties.get(TASK_BYTES_PROPERTY)
    if text is None:
        return DEFAULT_TASK_BYTES
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"table property {TASK_BYTES_PROPERTY}={text!r} must be a number of bytes (-1: never in Spark tasks)"
        ) from None


def in_tasks(files: Sequence[FileScanTask], threshold: int) -> bool:
    """Whether a group that reads `files` rewrites them in Spark tasks rather than in the driver."""
    return bool(files) and threshold >= 0 and sum(t.file.file_size_in_bytes for t in files) >= threshold


def choose_rewrite(session: SessionProvider | None) -> RewriteFiles:
    """The rewrite of a group's files: in Spark tasks when the rule says so and there is a session."""

    def rewrite(group: GroupFiles) -> tuple[list[FileRewrite], int]:
        if (
            session is None
            or not in_tasks(group.tasks, task_bytes(group.metadata.properties))
            or not _can_map_in_arrow()
        ):
            return rewrite_in_driver(group)
        return rewrite_in_tasks(session(), group)

    return rewrite


@functools.lru_cache(maxsize=1)
def _can_map_in_arrow() -> bool:
    """PySpark's mapInArrow imports pandas; without it the files are rewritten in the driver (said once)."""
    if importlib.util.find_spec("pandas") is not None:
        return True
    log.warning(
        "the Iceberg mirror rewrites its target's files in the driver: Spark tasks need pandas "
        "(pip install 'icetail[dataframe]')"
    )
    return False


def rewrite_in_tasks(spark: Any, group: GroupFiles) -> tuple[list[FileRewrite], int]:
    """`rewrite_file` of every file in one Spark job; the outcomes in `group.tasks` order, the tasks used."""
    metadata, io, files, affected = group.metadata, group.io, group.tasks, group.affected
    groups = balanced_groups([t.file.file_size_in_bytes for t in files], TASKS_PER_CORE * _parallelism(spark))
    job = _RewriteJob(
        layout(metadata),
        fileio_items(io.properties.items()),
        # without the residual: the file is read whole (its rows matched by key), and the filter is big
        tuple(pickle.dumps(FileScanTask(t.file, t.delete_files)) for t in files),
        tuple(tuple(g) for g in groups),
        affected.key,
        affected.to_ipc(),
        group.transform,
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return job.run(batches)

    try:
        rows = spark.range(0, len(groups), 1, len(groups)).mapInArrow(run, _RESULT_SCHEMA).collect()
    except Exception as exc:  # noqa: BLE001 - Py4J, Spark Connect and worker errors alike: the job is retried
        raise SinkError(
            f"iceberg mirror: the Spark tasks rewriting {len(files)} file(s) failed: {error_text(exc)}"
        ) from exc
    outcomes: dict[int, tuple[bool, bytes]] = {int(r[0]): (bool(r[1]), bytes(r[2])) for r in rows}
    for index in sorted(i for i, (ok, _) in outcomes.items() if not ok):
        raise pickle.loads(outcomes[index][1])  # the first failed file's error, as the driver meets it
    missing = [files[i].file.file_path for i in range(len(files)) if i not in outcomes]
    if missing:
        raise SinkError(f"iceberg mirror: no Spark task rewrote {missing[0]} ({len(missing)} file(s) missing)")
    return [pickle.loads(outcomes[i][1]) for i in range(len(files))], len(groups)


def layout(metadata: TableMetadata) -> str:
    """The metadata a task reads and writes with, as JSON: the schema, specs, location and properties,
    not the history (snapshots grow with the groups applied)."""
    stripped = metadata.model_copy(
        update={"snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {}, "current_snapshot_id": None}
    )
    return stripped.model_dump_json()


def balanced_groups(sizes: Sequence[int], most: int) -> list[list[int]]:
    """The indexes of `sizes` in at most `most` groups of about equal total size (largest first to
    the lightest group), each group's indexes in order."""
    count = max(1, min(most, len(sizes)))
    heap = [(0, g) for g in range(count)]
    groups: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, g = heapq.heappop(heap)
        groups[g].append(index)
        heapq.heappush(heap, (total + sizes[index], g))
    return [sorted(g) for g in groups if g]


def _parallelism(spark: Any) -> int:
    """Cores to plan tasks for: the context's default parallelism; on Spark Connect (no context)
    `spark.default.parallelism` when set, else this host's cores."""
    context = getattr(spark, "sparkContext", None) if "connect" not in type(spark).__module__ else None
    if context is not None:
        return int(context.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    return int(configured) if configured else os.cpu_count() or 2


@dataclass(frozen=True)
class _RewriteJob:
    """What every task of one rewrite job gets; task i rewrites the files of `groups[i]`."""

    layout_json: str
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)  # credentials: see __repr__
    files: tuple[bytes, ...] = field(repr=False)  # pickled FileScanTasks
    groups: tuple[tuple[int, ...], ...] = ()
    key: tuple[str, ...] = ()
    keys_ipc: bytes = field(default=b"", repr=False)
    transform: FileTransform | None = None

    def __repr__(self) -> str:
        return f"_RewriteJob(files={len(self.files)}, io_properties={redacted_items(self.io_properties)!r})"

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        assert self.transform is not None
        metadata = _parsed_layout(self.layout_json)
        io = load_file_io(dict(self.io_properties), metadata.location)
        affected = AffectedKeys.from_ipc(self.key, self.keys_ipc)
        for batch in batches:
            for group in batch.column(0).to_pylist():
                for index in self.groups[group]:
                    try:
                        outcome = rewrite_file(metadata, io, pickle.loads(self.files[index]), affected, self.transform)
                        ok, payload = True, pickle.dumps(outcome)
                    except Exception as exc:  # noqa: BLE001 - handed to the driver, which raises it
                        ok, payload = False, _pickled_error(exc)
                    yield pa.RecordBatch.from_arrays(
                        [pa.array([index], pa.int32()), pa.array([ok]), pa.array([payload], pa.binary())],
                        ["file", "ok", "payload"],
                    )
                    if not ok:
                        return


@functools.lru_cache(maxsize=8)
def _parsed_layout(layout_json: str) -> TableMetadata:
    """Parsed once per worker process and layout."""
    return TableMetadataUtil.parse_raw(layout_json)


def _pickled_error(exc: Exception) -> bytes:
    """The exception as the driver will raise it; one that does not pickle as its kind, by text."""
    try:
        payload = pickle.dumps(exc)
        pickle.loads(payload)
        return payload
    except Exception:  # noqa: BLE001 - an exception with an unpicklable attribute
        kind: type[Exception] = ValueError if isinstance(exc, REJECTED_ERRORS) else OSError
        return pickle.dumps(kind(error_text(exc)))
