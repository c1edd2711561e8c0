"""One data file of the Iceberg mirror's target rewritten for a group: read (its position deletes
applied), changed by a per-file transform, its rows written again as new data file(s) of the target.

The same function runs in the driver (`rewrite_in_driver`) and in Spark tasks
(`iceberg/mirror/tasks`), so both give the same commit. The transform is a plain function of one
file's rows (rows in -> rows out + counts), picklable (a module-level function, or a frozen
dataclass instance carrying its parameters) because the tasks get it by value: the mirror's
`drop_affected` takes the rows of affected keys out; another mode (a history that closes the open
versions of affected keys) plugs in its own transform.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

_ROW = "__icetail_row"
_FRESH = "__icetail_fresh"
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


@dataclass(frozen=True)
class AffectedKeys:
    """The keys a group changes: every file row of one of them is affected."""

    key: tuple[str, ...]  # the key columns, in the target's names
    keys: pa.Table  # every affected key (a deleted key and an upserted one both lose their old row)
    fresh_mask: pa.BooleanArray  # per key: the group inserts it fresh (a row of it in the target is a duplicate)

    @property
    def fresh(self) -> pa.Table:
        return self.keys.filter(self.fresh_mask)

    def to_ipc(self) -> bytes:
        """The keys and their mask as one Arrow IPC stream (lz4): what Spark tasks get, once per job."""
        rows = self.keys.append_column(_FRESH, self.fresh_mask)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema, options=_IPC) as writer:
            writer.write_table(rows)
        return bytes(sink.getvalue())

    @staticmethod
    def from_ipc(key: tuple[str, ...], data: bytes) -> AffectedKeys:
        rows = pa.ipc.open_stream(data).read_all()
        return AffectedKeys(key, rows.select(list(key)), rows.column(_FRESH).combine_chunks())


@dataclass(frozen=True)
class FileChange:
    """What a transform made of one file's rows."""

    rows: pa.Table  # the rows the file's rewrite holds
    affected: int  # rows of an affected key the file held (dropped or changed); 0: the file stays as it is
    duplicates: int  # of those, rows of a key the group inserts fresh


class FileTransform(Protocol):
    """One file's rows in, its rewrite's rows out (plus counts); picklable, it runs in Spark tasks."""

    def __call__(self, rows: pa.Table, affected: AffectedKeys, /) -> FileChange: ...


def drop_affected(rows: pa.Table, affected: AffectedKeys) -> FileChange:
    """The mirror's transform: the rows of affected keys taken out (their new rows are appended apart)."""
    hit = matches(rows, affected.keys, affected.key)
    found = int(hit.sum())
    if not found:
        return FileChange(rows, 0, 0)
    fresh = affected.fresh
    duplicates = int(matches(rows.filter(pa.array(hit)), fresh, affected.key).sum()) if fresh.num_rows else 0
    return FileChange(rows.filter(pa.array(~hit)), found, duplicates)


@dataclass(frozen=True)
class FileRewrite:
    """One read file's outcome: unchanged (`new` None) or replaced by `new` (none when nothing is left)."""

    old: DataFile
    new: tuple[DataFile, ...] | None
    affected: int
    duplicates: int


def rewrite_file(
    metadata: TableMetadata, io: FileIO, task: FileScanTask, affected: AffectedKeys, transform: FileTransform
) -> FileRewrite:
    """Read `task`'s file with its deletes, transform its rows, write them again if the transform
    changed any (uncommitted; a file of its own write uuid, so tasks never collide on a name)."""
    rows = ArrowScan(metadata, io, projected_schema=metadata.schema(), row_filter=AlwaysTrue()).to_table([task])
    change = transform(rows, affected)
    if not change.affected:
        return FileRewrite(task.file, None, 0, 0)
    new = tuple(_dataframe_to_data_files(metadata, change.rows, io, uuid.uuid4())) if change.rows.num_rows else ()
    return FileRewrite(task.file, new, change.affected, change.duplicates)


@dataclass(frozen=True)
class GroupFiles:
    """The files a group rewrites (their scan tasks, in order) and how: the target's metadata and
    io, the keys the group affects, the transform of each file's rows."""

    metadata: TableMetadata
    io: FileIO
    tasks: Sequence[FileScanTask]
    affected: AffectedKeys
    transform: FileTransform


# the files' outcomes in `tasks` order, and the Spark tasks that made them (0: the driver did)
RewriteFiles = Callable[[GroupFiles], tuple[list[FileRewrite], int]]


def rewrite_in_driver(group: GroupFiles) -> tuple[list[FileRewrite], int]:
    """Each file in turn, in this process (a group that reads few small files: no Spark job to pay)."""
    return [rewrite_file(group.metadata, group.io, task, group.affected, group.transform) for task in group.tasks], 0


def matches(rows: pa.Table, keys: pa.Table, key: Sequence[str]) -> np.ndarray:
    """For each row of `rows`: whether its key is one of `keys` (a semi-join on the key columns)."""
    n = rows.num_rows
    if not n or not keys.num_rows:
        return np.zeros(n, dtype=bool)
    left = {f"k{i}": joinable(rows.column(name)) for i, name in enumerate(key)}
    right = {f"k{i}": joinable(keys.column(name)).cast(left[f"k{i}"].type) for i, name in enumerate(key)}
    left[_ROW] = pa.array(np.arange(n))
    names = [f"k{i}" for i in range(len(key))]
    joined = pa.table(left).join(pa.table(right), keys=names, join_type="left semi")
    hit = np.zeros(n, dtype=bool)
    hit[joined.column(_ROW).to_numpy()] = True
    return hit


def joinable(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`column` as one array a join takes (an extension type, such as uuid, by its storage)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.storage if isinstance(array.type, pa.BaseExtensionType) else array
