"""The mirror's local merge on real Arrow tables: one net change per key, in commit order."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.keyed.merge import local_merge

INS, D, UB, UA = "INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"


def _rows(*changes: tuple[int, str, str, int]) -> pa.Table:
    """(id, v, change type, ordinal) rows, in the order given (the chunk's order)."""
    ids, values, types, ordinals = zip(*changes, strict=True) if changes else ((), (), (), ())
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array(values, pa.large_string()),
            "_change_type": pa.array(types, pa.string()),
            "_change_ordinal": pa.array(ordinals, pa.int32()),
        }
    )


def _net(rows: pa.Table, key: tuple[str, ...] = ("id",)) -> tuple[dict[Any, tuple[str, str]], int]:
    """{key: (op, v)} and the duplicate count."""
    net = local_merge(rows, key)
    ops = net.ops.to_pylist()
    keys = net.rows.column("id").to_pylist()
    values = net.rows.column("v").to_pylist()
    assert len(set(keys)) == len(keys), "one row per key"
    return {k: (op, v) for k, op, v in zip(keys, ops, values, strict=True)}, net.duplicates


def test_update_changing_the_key_deletes_the_old_key() -> None:
    net, dups = _net(_rows((1, "a", UB, 5), (2, "a", UA, 5)))
    assert net == {1: ("D", "a"), 2: ("I", "a")} and dups == 0


def test_delete_then_reinsert_in_one_snapshot_keeps_the_row_whatever_the_row_order() -> None:
    # the reader may hand the insert first: within a snapshot deletes still come first
    net, _ = _net(_rows((7, "new", INS, 3), (7, "old", D, 3)))
    assert net == {7: ("U", "new")}


def test_delete_then_reinsert_in_later_snapshots() -> None:
    net, _ = _net(_rows((7, "x", INS, 4), (7, "old", D, 3), (8, "y", INS, 3), (8, "y", D, 4)))
    assert net == {7: ("U", "x"), 8: ("D", "y")}


def test_update_then_delete_is_a_delete() -> None:
    net, _ = _net(_rows((1, "a", UB, 1), (1, "b", UA, 1), (1, "b", D, 2)))
    assert net == {1: ("D", "b")}


def test_insert_then_update_is_a_fresh_insert_of_the_last_version() -> None:
    net, dups = _net(_rows((1, "a", INS, 1), (1, "a", UB, 2), (1, "b", UA, 2), (2, "z", INS, 2)))
    assert net == {1: ("I", "b"), 2: ("I", "z")} and dups == 0


def test_duplicate_keys_last_writer_wins_and_are_counted() -> None:
    net, dups = _net(_rows((1, "first", INS, 1), (1, "second", INS, 1), (1, "third", INS, 2), (2, "b", INS, 2)))
    assert net == {1: ("I", "third"), 2: ("I", "b")} and dups == 2


def test_composite_key_and_string_keys() -> None:
    rows = pa.table(
        {
            "k1": ["a", "a", "b", "a"],
            "k2": [1, 2, 1, 1],
            "v": ["x", "y", "z", "w"],
            "_change_type": [INS, INS, INS, D],
            "_change_ordinal": pa.array([1, 1, 1, 2], pa.int32()),
        }
    )
    net = local_merge(rows, ("k1", "k2"))
    got = sorted(
        zip(net.rows.column("k1").to_pylist(), net.rows.column("k2").to_pylist(), net.ops.to_pylist(), strict=True)
    )
    assert got == [("a", 1, "D"), ("a", 2, "I"), ("b", 1, "I")]


def test_uuid_keys_merge_by_value() -> None:
    a, b = b"\x01" * 16, b"\x02" * 16
    rows = pa.table(
        {
            "u": pa.array([a, b, a], pa.uuid()),
            "_change_type": [INS, INS, D],
            "_change_ordinal": pa.array([1, 1, 2], pa.int32()),
        }
    )
    net = local_merge(rows, ("u",))
    assert sorted(zip((x.bytes for x in net.rows.column("u").to_pylist()), net.ops.to_pylist(), strict=True)) == [
        (a, "D"),
        (b, "I"),
    ]


def test_empty_chunk() -> None:
    net, dups = _net(_rows())
    assert net == {} and dups == 0


def test_a_null_key_is_refused() -> None:
    rows = pa.table(
        {
            "id": pa.array([1, None], pa.int64()),
            "v": ["a", "b"],
            "_change_type": [INS, INS],
            "_change_ordinal": pa.array([1, 1], pa.int32()),
        }
    )
    with pytest.raises(SinkRejectedError, match="'id' is null in 1 change row"):
        local_merge(rows, ("id",))


def test_the_mirror_reads_the_readers_column_names() -> None:
    from icetail.reader.split import metadata_columns, row_lineage
    from icetail.sinks import change_columns as columns

    assert columns.METADATA_COLUMNS == metadata_columns.METADATA_COLUMNS
    assert (columns.CHANGE_TYPE, columns.CHANGE_ORDINAL) == (
        metadata_columns.CHANGE_TYPE,
        metadata_columns.CHANGE_ORDINAL,
    )
    assert columns.SCHEMA_ID == metadata_columns.SCHEMA_ID
    assert (columns.ROW_ID, columns.LAST_UPDATED_SEQUENCE_NUMBER, columns.ROW_ID_FIELD_ID) == (
        row_lineage.ROW_ID,
        row_lineage.LAST_UPDATED_SEQUENCE_NUMBER,
        row_lineage.ROW_ID_FIELD_ID,
    )
