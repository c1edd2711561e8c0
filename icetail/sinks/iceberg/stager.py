"""The Iceberg sink's Spark-task half: write a chunk as one data file of the sink table, uncommitted.

The driver commits the file afterwards (`IcebergTableSink.commit_staged`), recognising it by the
chunk's file name prefix. The staged token carries the file's path and the DataFile pyiceberg's
writer made of it (row count, size, column statistics from the footer it just wrote), so the
driver commits it without opening the file again (`staged_file`).
"""

from __future__ import annotations

import base64
import functools
import pickle
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import write_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import WriteTask
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from icetail.kernel.errors import SinkError, SinkRejectedError, error_text
from icetail.kernel.secrets import redacted_items
from icetail.sinks.base import ChunkKey, file_safe
from icetail.sinks.iceberg.errors import REJECTED_ERRORS
from icetail.sinks.iceberg.schema import conform


@dataclass(frozen=True)
class IcebergStager:
    """Runs in Spark tasks: writes a chunk as one data file of the sink table, not yet committed.

    Carries the table's layout (metadata without its history) as JSON and its FileIO properties;
    the table location must be reachable from the executors.
    """

    layout_json: str
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)  # credentials: see __repr__

    def __repr__(self) -> str:
        return f"IcebergStager(io_properties={redacted_items(self.io_properties)!r})"

    def stage(self, key: ChunkKey, rows: pa.Table) -> str:
        layout = _parsed_layout(self.layout_json)
        io = load_file_io(dict(self.io_properties), layout.location)
        schema = layout.schema()
        try:
            conformed = conform(rows, schema.as_arrow())
            task = _ChunkWriteTask(uuid.uuid4(), 0, schema, conformed.to_batches(), prefix=file_prefix(key))
            (data_file,) = list(write_file(io, layout, iter([task])))
        except OSError as exc:
            raise SinkError(
                f"iceberg sink: staging chunk {key.name} in {layout.location} failed: {error_text(exc)}"
            ) from exc
        except REJECTED_ERRORS as exc:
            raise SinkRejectedError(
                f"iceberg sink: chunk {key.name} does not fit the table: {error_text(exc)}"
            ) from exc
        return staged_token(data_file)


@functools.lru_cache(maxsize=8)
def _parsed_layout(layout_json: str) -> TableMetadata:
    """Parsed once per worker process and layout (every chunk of a batch shares it)."""
    return TableMetadataUtil.parse_raw(layout_json)


@dataclass(frozen=True)
class _ChunkWriteTask(WriteTask):
    """pyiceberg's write task, naming the file after the chunk so a stray file can be traced."""

    prefix: str = "icetail"

    def generate_data_file_filename(self, extension: str) -> str:
        return f"{self.prefix}-{self.write_uuid}.{extension}"


def file_prefix(key: ChunkKey) -> str:
    """How the names of `key`'s staged files begin."""
    return "icetail-" + file_safe(key.name)


def staged_name(path: str) -> str:
    """The file name of a staged file's path."""
    return path.rstrip("/").rsplit("/", 1)[-1]


_DATA_FILE = "\n"  # after the path: the pickled DataFile, base64 (a path holds no newline)


def staged_token(data_file: DataFile) -> str:
    """What `stage` returns: the file's path, then the DataFile the driver commits."""
    return f"{data_file.file_path}{_DATA_FILE}{base64.b64encode(pickle.dumps(data_file)).decode('ascii')}"


def staged_file(staged: str) -> tuple[str, DataFile | None]:
    """(path, DataFile) of a staged token; no DataFile for a bare path (then the driver reads the footer).

    The token comes from this sink's own Spark tasks, as every result Spark hands the driver. A
    DataFile the driver cannot take back (an executor with another pyiceberg, say) is not an
    error: the driver reads the file's footer instead, as for a bare path.
    """
    path, _, encoded = staged.partition(_DATA_FILE)
    if not encoded:
        return path, None
    try:
        data_file = pickle.loads(base64.b64decode(encoded))
    except Exception:  # noqa: BLE001 - any undecodable record falls back to the footer
        return path, None
    if not isinstance(data_file, DataFile) or data_file.file_path != path:
        return path, None
    return path, data_file
