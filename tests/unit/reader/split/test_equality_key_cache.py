"""Equality-delete keys are indexed once per worker process, and still match by value."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.schema import Schema

from icetail.kernel.model import DeleteContent, DeleteFileRef
from icetail.reader.changes.read_setup import read_context
from icetail.reader.split.fileio import file_io_for
from icetail.reader.split.projection import key_field
from icetail.reader.split.read import _delete_state
from tests.support.small_table import SmallTable


def _equality_delete(tmp_path: Path, name: str, ids: list[int]) -> DeleteFileRef:
    path = tmp_path / name
    field = pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"})
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}, schema=pa.schema([field])), path)
    return DeleteFileRef(
        f"file://{path}", "PARQUET", len(ids), path.stat().st_size, 0, "()", 9, DeleteContent.EQUALITY, (1,)
    )


def test_data_files_sharing_equality_deletes_share_one_key_set(small_table: SmallTable, tmp_path: Path) -> None:
    table = small_table.load()
    first, second = _equality_delete(tmp_path, "a.parquet", [2, 4]), _equality_delete(tmp_path, "b.parquet", [5])
    context = read_context(table, table.metadata.current_schema_id, [])
    # field 1 (`id`) as read_context flattens an equality field
    key_schema = Schema(key_field((table.schema().find_field(1),)))
    context = replace(context, equality_schema_json=key_schema.model_dump_json())
    io = file_io_for(dict(context.io_properties))

    one = _delete_state(io, context, "file:///data/x.parquet", (first, second))
    other_file = _delete_state(io, context, "file:///data/y.parquet", (second, first))
    assert other_file.equality[0] is one.equality[0]  # built once, whatever the order of the deletes
    keys = pa.table({"1": pa.array([1, 2, 3, 4, 5, None], pa.int64())})
    assert one.equality[0].matches(keys).tolist() == [False, True, False, True, True, False]

    only_first = _delete_state(io, context, "file:///data/x.parquet", (first,))
    assert only_first.equality[0] is not one.equality[0]
    assert only_first.equality[0].matches(keys).tolist() == [False, True, False, True, False, False]
