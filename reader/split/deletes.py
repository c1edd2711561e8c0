"""Delete files: position deletes, v3 deletion vectors and equality deletes, read vectorized.

Positions come back as sorted numpy int64 arrays of file-absolute row positions; equality
deletes as Arrow key tables. A small per-process cache keeps decoded delete files, because
neighbouring splits of one data file need the same deletes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.table.puffin import PuffinFile

from icetail.kernel.errors import MetadataError
from icetail.kernel.lru import LRU
from icetail.kernel.model import DeleteContent, DeleteFileRef
from icetail.kernel.storage_errors import storage_error
from icetail.reader.split.pyiceberg_compat import deletion_vector_positions

FILE_PATH_COLUMN = "file_path"
POS_COLUMN = "pos"

_EMPTY = np.empty(0, dtype=np.int64)


_position_cache: LRU[Any, Any] = LRU(256)  # position files: path -> {data file: positions}; DVs: positions
_equality_cache: LRU[str, pa.Table] = LRU(64)


def _open(io: FileIO, path: str) -> Any:
    try:
        return io.new_input(path).open()
    except OSError as exc:
        hint = "the table's files were removed outside Iceberg"
        raise storage_error(exc, "delete file", path, hint=hint) from exc


def _read_position_file(io: FileIO, delete: DeleteFileRef) -> dict[str, np.ndarray]:
    """All (file_path -> positions) of a v2 position delete file."""
    cached = _position_cache.get(delete.path)
    if cached is not None:
        return cached
    fmt = delete.file_format.upper()
    with _open(io, delete.path) as stream:
        if fmt == "PARQUET":
            table = pq.read_table(stream, columns=[FILE_PATH_COLUMN, POS_COLUMN])
        elif fmt == "ORC":
            import pyarrow.orc as orc

            table = orc.ORCFile(stream).read(columns=[FILE_PATH_COLUMN, POS_COLUMN])
        else:
            raise MetadataError(f"position delete file {delete.path} has unsupported format {delete.file_format}")
    paths = table.column(FILE_PATH_COLUMN).combine_chunks()
    if isinstance(paths, pa.DictionaryArray):
        paths = paths.dictionary_decode()
    positions = table.column(POS_COLUMN).to_numpy()
    result: dict[str, np.ndarray] = {}
    encoded = pc.dictionary_encode(paths)
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    for i, path in enumerate(encoded.dictionary.to_pylist()):
        result[path] = np.sort(positions[indices == i])
    _position_cache.put(delete.path, result)
    return result


def _read_deletion_vector(io: FileIO, delete: DeleteFileRef, data_path: str) -> np.ndarray:
    key = (delete.path, delete.content_offset, data_path)
    cached = _position_cache.get(key)
    if cached is not None:
        return cached
    with _open(io, delete.path) as stream:
        if delete.content_offset is not None and delete.content_size_in_bytes is not None:
            stream.seek(delete.content_offset)
            found = deletion_vector_positions(stream.read(delete.content_size_in_bytes))
        else:
            from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file

            vectors = {
                dv.referenced_data_file: dv for dv in deletion_vectors_from_puffin_file(PuffinFile(stream.read()))
            }
            if data_path not in vectors:
                return _EMPTY
            found = np.asarray(vectors[data_path].to_vector().to_numpy(), dtype=np.int64)
    positions = np.sort(found)
    _position_cache.put(key, positions)
    return positions


def deleted_positions(io: FileIO, delete: DeleteFileRef, data_path: str) -> np.ndarray:
    """Sorted file-absolute positions of `data_path` that a position delete or DV removes."""
    if delete.content == DeleteContent.DELETION_VECTOR:
        return _read_deletion_vector(io, delete, data_path)
    if delete.content == DeleteContent.POSITION:
        return _read_position_file(io, delete).get(data_path, _EMPTY)
    raise ValueError(f"{delete.path} is an equality delete file, not a position delete")


def referenced_data_files(io: FileIO, delete: DeleteFileRef) -> frozenset[str]:
    """Data files a position delete or DV references (from metadata when present, else the file)."""
    if delete.referenced_data_file:
        return frozenset([delete.referenced_data_file])
    if delete.content == DeleteContent.DELETION_VECTOR:
        with _open(io, delete.path) as stream:
            return frozenset(
                blob.properties.get("referenced-data-file", "") for blob in PuffinFile(stream.read()).footer.blobs
            )
    return frozenset(_read_position_file(io, delete).keys())


def equality_delete_rows(io: FileIO, delete: DeleteFileRef) -> pa.Table:
    """The delete file's rows (physical columns, with field ids in the schema metadata)."""
    cached = _equality_cache.get(delete.path)
    if cached is not None:
        return cached
    if delete.file_format.upper() != "PARQUET":
        raise MetadataError(f"equality delete file {delete.path} has unsupported format {delete.file_format}")
    with _open(io, delete.path) as stream:
        table = pq.read_table(stream)
    _equality_cache.put(delete.path, table)
    return table
