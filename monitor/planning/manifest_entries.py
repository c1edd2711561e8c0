"""From a decoded manifest entry to icetail's frozen refs: file format, delete kind, partition
text, and each data file's v3 `first_row_id` by the spec's inheritance rule.

The manifests a reader decodes (manifests.py) become `FileEntry` values here and nothing of
pyiceberg's entry objects outlives the read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus

from icetail.kernel.model import DataFileRef, DeleteContent, DeleteFileRef
from icetail.reader.split.pyiceberg_compat import optional_data_file_field


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


def file_ref(data_file: DataFile, data_sequence_number: int, first_row_id: int | None) -> DataFileRef | DeleteFileRef:
    fmt = str(data_file.file_format.value if hasattr(data_file.file_format, "value") else data_file.file_format)
    shared = (  # the fields of ContentFileRef, in its order
        data_file.file_path,
        fmt,
        data_file.record_count,
        data_file.file_size_in_bytes,
        data_file.spec_id,
        partition_text(data_file.partition),
        data_sequence_number,
    )
    if data_file.content == DataFileContent.DATA:
        offsets = tuple(sorted(data_file.split_offsets)) if data_file.split_offsets else None
        return DataFileRef(*shared, split_offsets=offsets, first_row_id=first_row_id)
    if data_file.content == DataFileContent.EQUALITY_DELETES:
        content = DeleteContent.EQUALITY
    elif fmt.upper() == "PUFFIN":
        content = DeleteContent.DELETION_VECTOR
    else:
        content = DeleteContent.POSITION
    return DeleteFileRef(
        *shared,
        content=content,
        equality_field_ids=tuple(data_file.equality_ids or ()),
        referenced_data_file=optional_data_file_field(data_file, "referenced_data_file"),
        content_offset=optional_data_file_field(data_file, "content_offset"),
        content_size_in_bytes=optional_data_file_field(data_file, "content_size_in_bytes"),
    )


def first_row_ids(entries: list[ManifestEntry], manifest_first_row_id: int | None) -> list[int | None]:
    """Each entry's data-file `first_row_id` (v3 row lineage), per the spec's First Row ID Inheritance.

    An explicit value is kept. A live (ADDED or EXISTING) data file without one inherits the
    manifest's `first_row_id` plus the record counts of the live data files before it in the
    manifest that had none either; without a manifest `first_row_id` (a snapshot from before a
    v3 upgrade) it stays None. A DELETED entry never inherits: the snapshot that removes a file
    copies the value the file had, and the manifest's range is for files it assigns ids to.
    Delete files have no row ids.
    """
    next_row_id = manifest_first_row_id
    found: list[int | None] = []
    for entry in entries:
        data_file = entry.data_file
        explicit = optional_data_file_field(data_file, "first_row_id")
        if data_file.content != DataFileContent.DATA or explicit is not None:
            found.append(explicit if data_file.content == DataFileContent.DATA else None)
            continue
        if entry.status == ManifestEntryStatus.DELETED or next_row_id is None:
            found.append(None)
            continue
        found.append(next_row_id)
        next_row_id += data_file.record_count
    return found
