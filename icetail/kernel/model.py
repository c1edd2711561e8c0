"""Frozen values that cross every boundary: planner -> reader -> sink -> checkpoint store.

They hold only primitives so that they pickle to Spark executors and encode to JSON for the
write-ahead batch record. Row positions are file-absolute, 0-based; every range names whether
its bounds are inclusive or exclusive.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ChangeType(str, Enum):
    """Row level: Iceberg's changelog `_change_type` values (compare FileChangeKind, the file level)."""

    INSERT = "INSERT"
    DELETE = "DELETE"
    UPDATE_BEFORE = "UPDATE_BEFORE"
    UPDATE_AFTER = "UPDATE_AFTER"


class FileChangeKind(str, Enum):
    """File level: how a data file took part in a snapshot (the planner's decision, docs/semantics.md).

    The reader turns it into row-level ChangeTypes; the stored value ("added", ...) is part of the
    persisted split format and of split ids, so it never changes.
    """

    ADDED = "added"  # not live at the parent, live at the snapshot: visible rows are INSERTs
    REMOVED = "removed"  # live at the parent, gone at the snapshot: rows visible at the parent are DELETEs
    MODIFIED = "modified"  # live at both, its deletes changed: the difference of the visible rows


class DeleteContent(str, Enum):
    POSITION = "position"  # v2 position delete file (parquet/orc/avro with file_path, pos)
    DELETION_VECTOR = "deletion_vector"  # v3 Puffin deletion-vector blob
    EQUALITY = "equality"  # rows whose equality columns match a delete row


@dataclass(frozen=True)
class ContentFileRef:
    """What a data file and a delete file both are, as a manifest entry lists them."""

    path: str
    file_format: str
    record_count: int
    file_size_in_bytes: int
    spec_id: int
    partition: str  # canonical text of the partition tuple, only compared for equality
    data_sequence_number: int


@dataclass(frozen=True)
class DataFileRef(ContentFileRef):
    split_offsets: tuple[int, ...] | None = None
    # v3 row lineage: `_row_id` of the file's row 0 (explicit or inherited from its manifest, per the
    # spec's First Row ID Inheritance); None when the file has no lineage (v1/v2, written before v3)
    first_row_id: int | None = None


@dataclass(frozen=True)
class DeleteFileRef(ContentFileRef):
    content: DeleteContent  # after the shared fields: build it by keyword
    equality_field_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None
    content_offset: int | None = None  # deletion vectors: blob offset inside the Puffin file
    content_size_in_bytes: int | None = None


@dataclass(frozen=True)
class CommitInfo:
    """The snapshot a change belongs to, and its 0-based position among the range's snapshots."""

    snapshot_id: int
    parent_id: int | None
    operation: str
    timestamp_ms: int
    sequence_number: int
    ordinal: int
    # the schema the snapshot was written with (its `schema-id`; the table's current one when the
    # snapshot has none); None only in splits persisted before split format 3
    schema_id: int | None = None


@dataclass(frozen=True)
class ChangeTask:
    """One data file in one snapshot, with the delete files live before and after that snapshot."""

    data_file: DataFileRef
    kind: FileChangeKind
    commit: CommitInfo
    deletes_before: tuple[DeleteFileRef, ...] = ()  # applicable at the parent; unused for ADDED
    deletes_after: tuple[DeleteFileRef, ...] = ()  # applicable at the snapshot; unused for REMOVED


@dataclass(frozen=True)
class ChangeSplit:
    """A bounded piece of a task: row groups [row_group_start, row_group_end) of the data file.

    `row_group_end is None` means "to the end of the file" (used when the planner does not know
    the row-group layout). `split_id` is a hash of the fields, stable across processes and runs.
    """

    task: ChangeTask
    row_group_start: int = 0
    row_group_end: int | None = None
    estimated_rows: int = 0
    estimated_bytes: int = 0
    split_id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.split_id:
            object.__setattr__(self, "split_id", _stable_hash(self._identity()))

    def _identity(self) -> dict[str, Any]:
        return {
            "file": self.task.data_file.path,
            "kind": self.task.kind.value,
            "snapshot": self.task.commit.snapshot_id,
            "rg": [self.row_group_start, self.row_group_end],
        }


def _stable_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:24]
