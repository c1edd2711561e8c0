"""Read manifest lists and manifests into frozen refs, caching by path.

Manifests are immutable files, so a cache keyed by path is always valid; in serve mode it
makes planning one new snapshot read only that snapshot's new manifests.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
from pyiceberg.table.snapshots import Snapshot

from state.errors import MetadataError
from state.model import DataFileRef, DeleteContent, DeleteFileRef

# pyiceberg 0.12 reads manifests with the v2 schema, which drops the v3 fields deletion vectors
# need (referenced_data_file, content_offset, content_size_in_bytes); read with v3, a superset.
_READ_VERSION = 3
_DATA_FILE_FIELDS = [f.name for f in DATA_FILE_TYPE[_READ_VERSION].fields]


def _optional_field(data_file: DataFile, name: str) -> Any:
    if name not in _DATA_FILE_FIELDS:
        return None
    index = _DATA_FILE_FIELDS.index(name)
    return data_file[index] if index < len(data_file) else None


def partition_text(partition: Any) -> str:
    """Canonical text of a partition tuple: equal partitions give equal text."""
    if partition is None:
        return "()"
    return repr(tuple(partition[i] for i in range(len(partition))))


@dataclass(frozen=True)
class FileEntry:
    """One manifest entry: a data or delete file with its status and the snapshot that set it."""

    status: ManifestEntryStatus
    snapshot_id: int | None
    file: DataFileRef | DeleteFileRef


def _to_ref(data_file: DataFile, data_sequence_number: int) -> DataFileRef | DeleteFileRef:
    fmt = str(data_file.file_format.value if hasattr(data_file.file_format, "value") else data_file.file_format)
    partition = partition_text(data_file.partition)
    if data_file.content == DataFileContent.DATA:
        offsets = data_file.split_offsets
        return DataFileRef(
            path=data_file.file_path,
            file_format=fmt,
            record_count=data_file.record_count,
            file_size_in_bytes=data_file.file_size_in_bytes,
            spec_id=data_file.spec_id,
            partition=partition,
            data_sequence_number=data_sequence_number,
            split_offsets=tuple(sorted(offsets)) if offsets else None,
        )
    if data_file.content == DataFileContent.EQUALITY_DELETES:
        content = DeleteContent.EQUALITY
    elif fmt.upper() == "PUFFIN":
        content = DeleteContent.DELETION_VECTOR
    else:
        content = DeleteContent.POSITION
    return DeleteFileRef(
        path=data_file.file_path,
        file_format=fmt,
        content=content,
        record_count=data_file.record_count,
        file_size_in_bytes=data_file.file_size_in_bytes,
        spec_id=data_file.spec_id,
        partition=partition,
        data_sequence_number=data_sequence_number,
        equality_field_ids=tuple(data_file.equality_ids or ()),
        referenced_data_file=_optional_field(data_file, "referenced_data_file"),
        content_offset=_optional_field(data_file, "content_offset"),
        content_size_in_bytes=_optional_field(data_file, "content_size_in_bytes"),
    )


def _read_entries(io: FileIO, manifest: ManifestFile) -> list[ManifestEntry]:
    """Every entry of a manifest, read with the v3 entry schema, sequence numbers inherited."""
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[_READ_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        return [_inherit_from_manifest(entry, manifest) for entry in reader]


class ManifestReader:
    """Reads manifest lists and manifests through a FileIO, with a bounded LRU of manifests."""

    def __init__(self, io: FileIO, max_cached_manifests: int = 4096) -> None:
        self._io = io
        self._max = max_cached_manifests
        self._entries: OrderedDict[str, tuple[FileEntry, ...]] = OrderedDict()
        self._lists: OrderedDict[str, tuple[ManifestFile, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.manifests_read = 0  # cache misses, for planning metrics and benchmarks

    def manifest_list(self, snapshot: Snapshot) -> tuple[ManifestFile, ...]:
        key = snapshot.manifest_list
        with self._lock:
            if key in self._lists:
                self._lists.move_to_end(key)
                return self._lists[key]
        try:
            manifests = tuple(snapshot.manifests(self._io))
        except FileNotFoundError as exc:
            raise MetadataError(
                f"manifest list of snapshot {snapshot.snapshot_id} is missing ({key}); "
                "the snapshot's metadata was deleted"
            ) from exc
        except (OSError, ValueError) as exc:
            raise MetadataError(f"manifest list of snapshot {snapshot.snapshot_id} cannot be read: {exc}") from exc
        with self._lock:
            self._lists[key] = manifests
            if len(self._lists) > self._max:
                self._lists.popitem(last=False)
        return manifests

    def entries(self, manifest: ManifestFile) -> tuple[FileEntry, ...]:
        """Every entry of the manifest, DELETED ones included, with inherited sequence numbers."""
        key = manifest.manifest_path
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        try:
            raw = _read_entries(self._io, manifest)
        except FileNotFoundError as exc:
            raise MetadataError(f"manifest {key} is missing; the table metadata is damaged") from exc
        except (OSError, ValueError) as exc:
            raise MetadataError(f"manifest {key} cannot be read: {exc}") from exc
        entries = tuple(
            FileEntry(
                status=e.status,
                snapshot_id=e.snapshot_id,
                file=_to_ref(e.data_file, e.sequence_number if e.sequence_number is not None else 0),
            )
            for e in raw
        )
        with self._lock:
            self.manifests_read += 1
            self._entries[key] = entries
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return entries

    def added_in(self, snapshot: Snapshot) -> list[FileEntry]:
        """Entries that `snapshot` itself ADDED or DELETED, read from the manifests it wrote."""
        found: list[FileEntry] = []
        for manifest in self.manifest_list(snapshot):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in self.entries(manifest):
                if entry.snapshot_id == snapshot.snapshot_id and entry.status != ManifestEntryStatus.EXISTING:
                    found.append(entry)
        return found

    def live(self, snapshot: Snapshot, content: ManifestContent) -> list[FileEntry]:
        """Live (ADDED or EXISTING) entries of one content kind at `snapshot`."""
        found: list[FileEntry] = []
        for manifest in self.manifest_list(snapshot):
            if manifest.content != content:
                continue
            found.extend(e for e in self.entries(manifest) if e.status != ManifestEntryStatus.DELETED)
        return found
