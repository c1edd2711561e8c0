"""Every pyiceberg internal icetail relies on, in one file: a pyiceberg upgrade touches only this one.

pyiceberg (pinned >=0.12,<0.13) has no public API for these; each function below names what
it stands for, says which internal it uses and why, and is tested directly against the
installed pyiceberg in tests/unit/reader/split/test_pyiceberg_compat.py, so an upgrade that changes one
fails there by name rather than deep inside planning or reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import META_SCHEMA, AvroFile, AvroFileHeader
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader, resolve_reader
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
    _inherit_from_manifest,
)
from pyiceberg.schema import Schema
from pyiceberg.table.deletion_vector import DeletionVector, _extract_vector_payload

from icetail.kernel.lru import LRU

# pyiceberg 0.12 reads manifests with the v2 schema, which drops the v3 fields deletion vectors
# need (referenced_data_file, content_offset, content_size_in_bytes); read with v3, a superset.
MANIFEST_READ_VERSION = 3
_DATA_FILE_FIELDS = [f.name for f in DATA_FILE_TYPE[MANIFEST_READ_VERSION].fields]
_MANIFEST_LIST_FIELDS = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[MANIFEST_READ_VERSION].fields]


class _ReaderCachingAvroFile(AvroFile[Any]):
    """pyiceberg's AvroFile, but the reader tree of a file's schema is built once per process.

    `AvroFile.__enter__` parses the header's Avro schema into an Iceberg schema and resolves a
    reader against the read schema for every file: for a manifest of 20 entries that is most of
    its decoding time. Every manifest (or manifest list) one writer wrote has the same header
    schema text, and a resolved reader holds no state of the file it reads, so the pair is cached
    by (the header's schema text, what is read); so is the reader of the header itself.
    """

    __slots__ = ("_kind",)

    def __init__(self, kind: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kind = kind

    def __enter__(self) -> _ReaderCachingAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        key = (self._kind, self.header.meta.get(_AVRO_SCHEMA_KEY, ""))
        cached = _avro_readers.get(key)
        if cached is None:
            schema = self.header.get_schema()
            read_schema = self.read_schema or schema
            cached = (schema, resolve_reader(schema, read_schema, self.read_types, self.read_enums))
            _avro_readers.put(key, cached)
        self.schema, self.reader = cached
        if not self.read_schema:
            self.read_schema = self.schema
        return self

    def _read_header(self) -> AvroFileHeader:
        return _HEADER_READER.read(self.decoder)


_AVRO_SCHEMA_KEY = "avro.schema"
_HEADER_READER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})  # pyiceberg builds it per file
_avro_readers: LRU[tuple[str, str], tuple[Schema, Reader]] = LRU(64)


def open_manifest_list(io: FileIO, path: str) -> AvroFile[ManifestFile]:
    """The manifest list as pyiceberg's `read_manifest_list` decodes it, one record at a time (so a
    reader can stop early), where pyiceberg only offers the whole list; read with the v3 schema (a
    superset of v2's) so that `manifest_first_row_id` is there."""
    return _ReaderCachingAvroFile(
        "manifest-list",
        io.new_input(path),
        MANIFEST_LIST_FILE_SCHEMAS[MANIFEST_READ_VERSION],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    )


def read_manifest_entries(
    io: FileIO, manifest: ManifestFile, until: Callable[[ManifestEntry], bool] | None = None
) -> list[ManifestEntry]:
    """Every entry of a manifest, DELETED ones included, read with the v3 entry schema and with the
    snapshot id and sequence numbers inherited from the manifest (`_inherit_from_manifest`).

    `until`: stop after the first entry it is true of (that entry included): the records after it
    are not decoded (pyiceberg's AvroFile decodes one record at a time).
    """
    with _ReaderCachingAvroFile(
        "manifest",
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[MANIFEST_READ_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        if until is None:
            return [_inherit_from_manifest(entry, manifest) for entry in reader]
        found: list[ManifestEntry] = []
        for entry in reader:
            found.append(_inherit_from_manifest(entry, manifest))
            if until(found[-1]):
                break
        return found


def read_manifest_list(io: FileIO, path: str) -> list[ManifestFile]:
    """Every manifest of a manifest list, with the v3 fields (pyiceberg's `Snapshot.manifests` drops them)."""
    with open_manifest_list(io, path) as reader:
        return list(reader)


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    """The manifest list's `first_row_id` of a manifest (v3, field 520; None before v3): pyiceberg's
    ManifestFile names only the v2 fields, so it is read by position."""
    index = _MANIFEST_LIST_FIELDS.index("first_row_id")
    return manifest[index] if index < len(manifest) else None


def optional_data_file_field(data_file: DataFile, name: str) -> Any:
    """A v3 field of a data file read by `read_manifest_entries` (None when the file predates it):
    pyiceberg's DataFile names only the v2 fields, so v3 ones are read by position."""
    if name not in _DATA_FILE_FIELDS:
        return None
    index = _DATA_FILE_FIELDS.index(name)
    return data_file[index] if index < len(data_file) else None


def deletion_vector_positions(blob: bytes) -> np.ndarray:
    """The deleted positions of one deletion-vector blob (a Puffin blob read at its offset), in no set order.

    pyiceberg decodes DVs only from a whole Puffin file; reading one blob at its offset needs its
    framing and bitmap decoders.
    """
    bitmaps = DeletionVector._deserialize_bitmap(_extract_vector_payload(blob))
    # pyiceberg's `to_vector` builds Python ints one position at a time (~10 ms per 100k);
    # each 32-bit bitmap's array, offset by its key, is the same positions in bulk
    parts = [
        np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.int64) + (key << 32)
        for key, bitmap in enumerate(bitmaps)
        if len(bitmap)
    ]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def metrics_may_match(schema: Schema, expression: BooleanExpression) -> Callable[[DataFile], bool]:
    """Whether a data file's column bounds, null and value counts allow a row matching `expression`.

    pyiceberg's `_InclusiveMetricsEvaluator` (what its own scans prune with; no public name).
    Empty files are kept: pruning decides only which files may hold matching rows.
    """
    return _InclusiveMetricsEvaluator(schema, expression, case_sensitive=True, include_empty_files=True).eval
