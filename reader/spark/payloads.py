"""What crosses from a Spark task to the driver: a chunk (Arrow IPC bytes or a handoff file) or an error."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from icetail.kernel.errors import DataFileError, IcetailError, is_disk_full
from icetail.kernel.model import ChangeSplit
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind
from icetail.reader.spark.local_disk import handoff_full
from icetail.reader.split.metadata_columns import constant_column_count, with_constant_metadata
from icetail.reader.split.read import Chunk
from icetail.sinks.base import SplitSlot


@dataclass(frozen=True)
class SplitRequest:
    """A split to run and the file row where it resumes (0 for a fresh split)."""

    split: ChangeSplit
    start_row_inclusive: int = 0
    # with a stager: the task writes the chunks itself under keys (consumer, batch id, split index)
    stage_as: SplitSlot | None = None
    # rows carry `_row_id` and `_last_updated_sequence_number` (for the output, or for update pairing)
    with_row_lineage: bool = False


@dataclass(frozen=True)
class _ChunkPayload:
    """A chunk on its way from a task to the driver; `chunk.batch` is None, its rows are in `data`.

    `data` is Arrow IPC stream bytes, the path of a handoff file, or empty (no rows, or staged);
    `constant` holds the four metadata values when every row shares them (they were cut off).
    """

    chunk: Chunk
    data: bytes | str
    constant: tuple[Any, ...] | None


@dataclass(frozen=True)
class TaskErrorPayload:
    """An IcetailError a task ended with, by class, for the driver to raise again."""

    module: str
    name: str
    message: str


Payload = _ChunkPayload | TaskErrorPayload


def task_error(exc: IcetailError | OSError | pa.ArrowException, request: SplitRequest) -> TaskErrorPayload:
    """What a task that failed reading `request` hands the driver: an IcetailError by class."""
    if isinstance(exc, IcetailError):
        return TaskErrorPayload(type(exc).__module__, type(exc).__name__, str(exc))
    path = request.split.task.data_file.path
    kind = storage_error_kind(exc, path) if isinstance(exc, OSError) else StorageErrorKind.OTHER
    if kind in (StorageErrorKind.DENIED, StorageErrorKind.TRANSIENT):  # mid-read: throttled, timed out
        error = storage_error(exc, "data file", path)
        return TaskErrorPayload(type(error).__module__, type(error).__name__, str(error))
    message = f"data file {path} cannot be read ({exc}); restore the file or skip its snapshot"
    return TaskErrorPayload(DataFileError.__module__, DataFileError.__name__, message)


def raise_task_error(error: TaskErrorPayload) -> None:
    """Raise, in the driver, the error a task handed over."""
    raise _rebuild_error(error.module, error.name, error.message)


def encode(chunk: Chunk, handoff: str | None = None) -> _ChunkPayload:
    """The chunk as a picklable payload: its rows as Arrow IPC bytes, or in a file under `handoff`.

    A chunk of one change type has the same four metadata values on every row (one split is one
    commit): they travel once, as values, and the driver repeats them (a quarter of the bytes).
    """
    if chunk.batch is None:
        return _ChunkPayload(chunk, b"", None)
    batch, constant = chunk.batch, None
    constants = constant_column_count(batch.schema)
    if len(chunk.change_counts) == 1 and batch.num_rows and constants:
        data_width = batch.num_columns - constants
        constant = tuple(_first_value(batch.column(data_width + i)) for i in range(constants))
        batch = batch.select(range(data_width))
    if handoff is not None:
        path = os.path.join(handoff, f"{uuid.uuid4().hex}.arrow")
        try:
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
                writer.write_batch(batch)
        except OSError as exc:  # the local disk, not the data file: say so (task_error keeps the class)
            with contextlib.suppress(OSError):
                os.unlink(path)
            if is_disk_full(exc):
                raise handoff_full(os.path.dirname(handoff)) from exc
            raise IcetailError(f"cannot write icetail's handoff file in {handoff}: {exc}") from exc
        return _ChunkPayload(replace(chunk, batch=None), path, constant)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return _ChunkPayload(replace(chunk, batch=None), sink.getvalue().to_pybytes(), constant)


def _first_value(column: pa.Array) -> Any:
    scalar = column[0]
    return scalar.value if isinstance(scalar, pa.TimestampScalar) else scalar.as_py()  # timestamps as int us


def decode(payload: Payload) -> Chunk:
    if isinstance(payload, TaskErrorPayload):
        raise _rebuild_error(payload.module, payload.name, payload.message)
    chunk, data, constant = payload.chunk, payload.data, payload.constant
    if not data:
        return chunk
    if isinstance(data, str):  # a handoff file: map it (no copy), then unlink it (the mapping stays)
        reader = pa.ipc.open_file(pa.memory_map(data))
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        os.unlink(data)
    else:
        batches = list(pa.ipc.open_stream(data))
    batch = batches[0] if batches else None
    if batch is not None and constant is not None:
        batch = with_constant_metadata(batch, constant)
    return replace(chunk, batch=batch)


def _rebuild_error(module: str, name: str, message: str) -> IcetailError:
    import importlib

    try:
        cls = getattr(importlib.import_module(module), name)
        return cls(message)
    except (ImportError, AttributeError, TypeError):
        return IcetailError(message)
