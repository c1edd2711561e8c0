"""The spec's sequence-number rules for applicable deletes, one test per rule, on values built directly (no JVM).

The differential tests check the same rules end to end against Java Iceberg; these pin each rule
to `monitor/planning/delete_index.py` so a change to one fails here with its name.
"""

from __future__ import annotations

from dataclasses import replace

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from icetail.kernel.model import DataFileRef, DeleteContent, DeleteFileRef
from icetail.monitor.planning.delete_index import (
    DeleteIndex,
    delete_identity,
    equality_delete_applies,
    global_spec_ids,
    position_delete_applies,
)

PARTITIONED_SPEC = 1
UNPARTITIONED_SPEC = 0
DATA = DataFileRef("a.parquet", "PARQUET", 10, 100, PARTITIONED_SPEC, "(p=1)", data_sequence_number=5)


def _delete(
    content: DeleteContent,
    seq: int,
    *,
    path: str = "d.parquet",
    references: str | None = "a.parquet",
    spec_id: int = PARTITIONED_SPEC,
    partition: str = "(p=1)",
    offset: int | None = None,
) -> DeleteFileRef:
    return DeleteFileRef(
        path=path,
        file_format="PUFFIN" if content == DeleteContent.DELETION_VECTOR else "PARQUET",
        content=content,
        record_count=1,
        file_size_in_bytes=10,
        spec_id=spec_id,
        partition=partition,
        data_sequence_number=seq,
        equality_field_ids=(1,) if content == DeleteContent.EQUALITY else (),
        referenced_data_file=references if content != DeleteContent.EQUALITY else None,
        content_offset=offset,
    )


def _referenced(delete: DeleteFileRef) -> frozenset[str]:
    return frozenset({delete.referenced_data_file}) if delete.referenced_data_file else frozenset()


def _index(*deletes: DeleteFileRef, global_specs: frozenset[int] = frozenset({UNPARTITIONED_SPEC})) -> DeleteIndex:
    return DeleteIndex(deletes, _referenced, global_specs)


# -- position deletes and deletion vectors: sequence number <= the delete's --------------------


def test_a_position_delete_applies_to_data_of_its_own_sequence_number() -> None:
    same = _delete(DeleteContent.POSITION, seq=5)
    assert position_delete_applies(same, DATA)
    assert _index(same).for_file(DATA) == (same,)


def test_a_position_delete_applies_to_older_data() -> None:
    newer = _delete(DeleteContent.POSITION, seq=9)
    assert position_delete_applies(newer, DATA)
    assert _index(newer).for_file(DATA) == (newer,)


def test_a_position_delete_never_applies_to_newer_data() -> None:
    older = _delete(DeleteContent.POSITION, seq=4)
    assert not position_delete_applies(older, DATA)
    assert _index(older).for_file(DATA) == ()


def test_a_position_delete_applies_only_to_the_files_it_references() -> None:
    other = _delete(DeleteContent.POSITION, seq=9, references="b.parquet")
    assert _index(other).for_file(DATA) == ()


def test_a_deletion_vector_follows_the_position_rule() -> None:
    same, older = (
        _delete(DeleteContent.DELETION_VECTOR, seq=5, offset=4),
        _delete(DeleteContent.DELETION_VECTOR, seq=4, path="old.puffin", offset=4),
    )
    assert _index(same, older).for_file(DATA) == (same,)


def test_deletion_vectors_in_one_puffin_file_are_told_apart_by_blob_offset() -> None:
    for_a = _delete(DeleteContent.DELETION_VECTOR, seq=6, path="dv.puffin", offset=4)
    for_b = _delete(DeleteContent.DELETION_VECTOR, seq=6, path="dv.puffin", references="b.parquet", offset=90)
    assert delete_identity(for_a) != delete_identity(for_b)
    index = _index(for_a, for_b)
    assert index.for_file(DATA) == (for_a,)
    assert index.for_file(replace(DATA, path="b.parquet")) == (for_b,)


# -- equality deletes: sequence number < the delete's, same partition unless global -----------


def test_an_equality_delete_never_applies_to_data_of_its_own_commit() -> None:
    same = _delete(DeleteContent.EQUALITY, seq=5)
    assert not equality_delete_applies(same, DATA, frozenset())
    assert _index(same).for_file(DATA) == ()


def test_an_equality_delete_applies_to_strictly_older_data() -> None:
    newer = _delete(DeleteContent.EQUALITY, seq=6)
    assert equality_delete_applies(newer, DATA, frozenset())
    assert _index(newer).for_file(DATA) == (newer,)
    assert not equality_delete_applies(_delete(DeleteContent.EQUALITY, seq=4), DATA, frozenset())


def test_an_equality_delete_applies_only_in_its_own_partition() -> None:
    elsewhere = _delete(DeleteContent.EQUALITY, seq=6, partition="(p=2)")
    assert not equality_delete_applies(elsewhere, DATA, frozenset())
    assert _index(elsewhere).for_file(DATA) == ()


def test_an_equality_delete_of_another_spec_does_not_apply_even_with_equal_partition_text() -> None:
    other_spec = _delete(DeleteContent.EQUALITY, seq=6, spec_id=2)
    assert not equality_delete_applies(other_spec, DATA, frozenset({UNPARTITIONED_SPEC}))


def test_an_equality_delete_of_an_unpartitioned_spec_applies_to_every_partition() -> None:
    global_delete = _delete(DeleteContent.EQUALITY, seq=6, spec_id=UNPARTITIONED_SPEC, partition="()")
    assert equality_delete_applies(global_delete, DATA, frozenset({UNPARTITIONED_SPEC}))
    assert _index(global_delete).for_file(DATA) == (global_delete,)
    # ... but still only to strictly older data
    assert _index(replace(global_delete, data_sequence_number=5)).for_file(DATA) == ()


def test_the_answer_is_deduplicated_and_ordered_by_file_and_blob_offset() -> None:
    eq = _delete(DeleteContent.EQUALITY, seq=7, path="a-eq.parquet")
    pos = _delete(DeleteContent.POSITION, seq=7, path="z-pos.parquet")
    dv_late, dv_early = (
        _delete(DeleteContent.DELETION_VECTOR, seq=7, path="m.puffin", offset=90),
        _delete(DeleteContent.DELETION_VECTOR, seq=7, path="m.puffin", offset=4),
    )
    first = _index(pos, dv_late, eq, dv_early, pos).for_file(DATA)
    assert first == (eq, dv_early, dv_late, pos)
    assert _index(dv_early, pos, eq, dv_late).for_file(DATA) == first


def test_global_specs_are_the_unpartitioned_specs_of_the_table() -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "p", StringType(), required=False))
    partitioned = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    unpartitioned = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///t", {})
    by_p = new_table_metadata(schema, partitioned, UNSORTED_SORT_ORDER, "file:///t", {})
    assert global_spec_ids(unpartitioned) == frozenset({unpartitioned.default_spec_id})
    assert global_spec_ids(by_p) == frozenset()
