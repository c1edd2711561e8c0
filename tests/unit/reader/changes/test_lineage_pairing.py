"""Update pairing by v3 row lineage (`_row_id`), and its fallback, on real Arrow tables."""

from __future__ import annotations

import pyarrow as pa

from icetail.reader.changes.reconcile import reconcile_snapshot

META = {"_change_ordinal": 0, "_commit_snapshot_id": 7, "_commit_timestamp": 0}


def _changes(rows: list[tuple[int | None, str, int | None, str]]) -> pa.Table:
    """(id, v, _row_id, _change_type) rows of one snapshot."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
            "_row_id": pa.array([r[2] for r in rows], pa.int64()),
            "_last_updated_sequence_number": pa.array([1] * len(rows), pa.int64()),
            "_change_type": [r[3] for r in rows],
            **{k: [v] * len(rows) for k, v in META.items()},
        }
    )


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(table.column(c).to_pylist() for c in ("id", "v", "_row_id", "_change_type")), strict=True))


def test_same_row_id_pairs_without_identifier_columns_and_drops_carry_over() -> None:
    out = reconcile_snapshot(
        _changes(
            [
                (1, "a", 10, "DELETE"),
                (2, "b", 11, "DELETE"),
                (3, "c", 12, "DELETE"),
                (1, "a", 10, "INSERT"),  # carry-over: same row id, same content
                (3, "C", 12, "INSERT"),  # update of row 12
                (9, "b", 20, "INSERT"),  # a new row: row 11 was deleted
            ]
        ),
        row_lineage=True,
    )
    # (2,'b') and (9,'b') differ in id; the new row 20 stays an INSERT
    assert _rows(out) == [
        (2, "b", 11, "DELETE"),
        (3, "c", 12, "UPDATE_BEFORE"),
        (3, "C", 12, "UPDATE_AFTER"),
        (9, "b", 20, "INSERT"),
    ]


def test_lineage_pairs_a_changed_key_and_swapped_values() -> None:
    out = reconcile_snapshot(
        _changes(
            [
                (1, "x", 10, "DELETE"),
                (2, "y", 11, "DELETE"),
                (1, "y", 10, "INSERT"),
                (2, "x", 11, "INSERT"),
                (5, "k", 12, "DELETE"),
                (6, "k", 12, "INSERT"),
            ]
        ),
        identifier_columns=["v"],  # lineage comes first: the swap is two updates, not cancelled by v
        row_lineage=True,
    )
    assert [r[3] for r in _rows(out)] == ["UPDATE_BEFORE", "UPDATE_AFTER"] * 3
    assert _rows(out)[0:2] == [(1, "x", 10, "UPDATE_BEFORE"), (1, "y", 10, "UPDATE_AFTER")]
    assert _rows(out)[4:6] == [(5, "k", 12, "UPDATE_BEFORE"), (6, "k", 12, "UPDATE_AFTER")]


def test_rows_without_lineage_fall_back_to_identifier_columns_then_delete_insert() -> None:
    rows = [
        (1, "a", None, "DELETE"),
        (2, "b", None, "DELETE"),
        (1, "A", None, "INSERT"),
        (3, "c", None, "INSERT"),
        (4, "d", 30, "DELETE"),
        (4, "d", None, "INSERT"),  # a writer that does not keep lineage: cancelled by content
    ]
    with_ids = reconcile_snapshot(_changes(rows), identifier_columns=["id"], row_lineage=True)
    assert _rows(with_ids) == [
        (2, "b", None, "DELETE"),
        (1, "a", None, "UPDATE_BEFORE"),
        (1, "A", None, "UPDATE_AFTER"),
        (3, "c", None, "INSERT"),
    ]
    without = reconcile_snapshot(_changes(rows), row_lineage=True)
    assert [r[3] for r in _rows(without)] == ["DELETE", "DELETE", "INSERT", "INSERT"]


def test_a_row_id_seen_twice_on_one_side_does_not_pair() -> None:
    out = reconcile_snapshot(
        _changes([(1, "a", 10, "DELETE"), (1, "b", 10, "INSERT"), (1, "c", 10, "INSERT")]), row_lineage=True
    )
    assert [r[3] for r in _rows(out)] == ["DELETE", "INSERT", "INSERT"]


def test_keep_carry_over_keeps_lineage_carry_overs_as_delete_insert() -> None:
    changes = _changes([(1, "a", 10, "DELETE"), (1, "a", 10, "INSERT"), (2, "b", 11, "DELETE"), (2, "B", 11, "INSERT")])
    out = reconcile_snapshot(changes, remove_carry_over=False, row_lineage=True)
    assert _rows(out) == [
        (1, "a", 10, "DELETE"),
        (2, "b", 11, "UPDATE_BEFORE"),
        (2, "B", 11, "UPDATE_AFTER"),
        (1, "a", 10, "INSERT"),
    ]


def test_without_row_lineage_the_row_id_column_is_not_used() -> None:
    out = reconcile_snapshot(_changes([(1, "a", 10, "DELETE"), (1, "A", 10, "INSERT")]))
    assert [r[3] for r in _rows(out)] == ["DELETE", "INSERT"]
