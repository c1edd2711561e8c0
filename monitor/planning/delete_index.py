"""Which delete files apply to a data file: the Iceberg spec's sequence-number rules, in one place.

Each rule is a small pure function (linked from docs/semantics.md, "Applicable deletes") and
`DeleteIndex` combines them over the delete files live at one snapshot. The lifecycle is one
way, as in pyiceberg's `delete_file_index.py`: the deletes are given once, then only queried.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from pyiceberg.table.metadata import TableMetadata

from icetail.kernel.model import DataFileRef, DeleteContent, DeleteFileRef

PathResolver = Callable[[DeleteFileRef], frozenset[str]]
"""Data file paths a position delete file references (read from the file when not in metadata)."""


def global_spec_ids(metadata: TableMetadata) -> frozenset[int]:
    """Unpartitioned specs: their equality deletes apply to every partition."""
    return frozenset(spec.spec_id for spec in metadata.specs().values() if spec.is_unpartitioned())


def position_delete_applies(delete: DeleteFileRef, data_file: DataFileRef) -> bool:
    """A position delete or deletion vector that references `data_file` applies to data of the same or older
    sequence number (`<=`): a delete committed with its data file can delete rows of it."""
    return delete.data_sequence_number >= data_file.data_sequence_number


def equality_delete_applies(delete: DeleteFileRef, data_file: DataFileRef, global_specs: frozenset[int]) -> bool:
    """An equality delete applies to strictly older data (`<`), in the same spec and partition, or in every
    partition when its spec is unpartitioned: so never to data files of its own commit."""
    if delete.data_sequence_number <= data_file.data_sequence_number:
        return False
    return delete.spec_id in global_specs or (
        delete.spec_id == data_file.spec_id and delete.partition == data_file.partition
    )


def delete_identity(delete: DeleteFileRef) -> tuple[str, int | None]:
    """A Puffin file holds the DVs of many data files: a delete is its file AND its blob offset."""
    return (delete.path, delete.content_offset)


class DeleteIndex:
    """Delete files live at one snapshot, answering which apply to a data file."""

    def __init__(self, deletes: Iterable[DeleteFileRef], resolve_paths: PathResolver, global_specs: frozenset[int]):
        self._by_path: dict[str, list[DeleteFileRef]] = defaultdict(list)
        self._equality: list[DeleteFileRef] = []
        self._global_specs = global_specs
        for delete in deletes:
            if delete.content == DeleteContent.EQUALITY:
                self._equality.append(delete)
            else:
                for path in resolve_paths(delete):
                    self._by_path[path].append(delete)

    def for_file(self, data_file: DataFileRef) -> tuple[DeleteFileRef, ...]:
        """The applicable deletes in a stable order (path, blob offset), so two answers compare equal."""
        found = [d for d in self._by_path.get(data_file.path, ()) if position_delete_applies(d, data_file)]
        found.extend(d for d in self._equality if equality_delete_applies(d, data_file, self._global_specs))
        return tuple(sorted(set(found), key=lambda d: (d.path, d.content_offset or -1)))
