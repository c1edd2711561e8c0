"""Row identity, carry-over removal and update pairing on real Arrow tables."""

from __future__ import annotations

import pyarrow as pa

from icetail.reader.changes.reconcile import reconcile_snapshot
from icetail.reader.split.equality import row_codes, rows_matching

META = {"_change_ordinal": 0, "_commit_snapshot_id": 7, "_commit_timestamp": 0}


def _changes(rows: list[tuple[int | None, str | None, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
            "_change_type": [r[2] for r in rows],
            **{k: [v] * len(rows) for k, v in META.items()},
        }
    )


def test_row_codes_treat_null_as_a_value() -> None:
    t = pa.table({"a": [1, None, 1, None], "b": ["x", None, "x", "y"]})
    codes = row_codes(t)
    assert codes[0] == codes[2] and codes[1] != codes[3] and len(set(codes.tolist())) == 3


def test_rows_matching_multi_column_with_nulls_and_casts() -> None:
    data = pa.table({"a": pa.array([1, 2, None, 4], pa.int64()), "b": ["x", "y", "z", None]})
    deletes = pa.table({"a": pa.array([2, None, 4], pa.int32()), "b": ["y", "z", "q"]})
    assert rows_matching(data, deletes).tolist() == [False, True, True, False]


def test_rows_matching_nested_types_fall_back() -> None:
    data = pa.table({"s": [{"k": 1}, {"k": 2}]})
    deletes = pa.table({"s": [{"k": 2}]})
    assert rows_matching(data, deletes).tolist() == [False, True]


def test_carry_over_cancels_as_a_multiset() -> None:
    out = reconcile_snapshot(
        _changes([(1, "a", "DELETE"), (1, "a", "DELETE"), (1, "a", "INSERT"), (2, "b", "DELETE"), (2, "B", "INSERT")])
    )
    assert sorted(zip(out["id"].to_pylist(), out["v"].to_pylist(), out["_change_type"].to_pylist(), strict=False)) == [
        (1, "a", "DELETE"),
        (2, "B", "INSERT"),
        (2, "b", "DELETE"),
    ]


def test_updates_pair_only_unique_keys() -> None:
    out = reconcile_snapshot(
        _changes([(1, "a", "DELETE"), (1, "A", "INSERT"), (2, "b", "DELETE"), (2, "b2", "DELETE"), (2, "B", "INSERT")]),
        identifier_columns=["id"],
    )
    rows = list(zip(out["id"].to_pylist(), out["v"].to_pylist(), out["_change_type"].to_pylist(), strict=False))
    assert rows.index((1, "a", "UPDATE_BEFORE")) + 1 == rows.index((1, "A", "UPDATE_AFTER"))
    assert {(2, "b", "DELETE"), (2, "b2", "DELETE"), (2, "B", "INSERT")} <= set(rows)


def test_keep_carry_over() -> None:
    changes = _changes([(1, "a", "DELETE"), (1, "a", "INSERT")])
    assert reconcile_snapshot(changes, remove_carry_over=False).num_rows == 2


def test_delete_key_sets_match_nulls_and_every_key_type() -> None:
    from icetail.reader.split.equality import DeleteKeySet

    ints = DeleteKeySet(pa.table({"1": pa.array([5, None, 9, 9], pa.int64())}))
    assert ints.matches(pa.table({"1": pa.array([1, 5, None, 9, 10], pa.int64())})).tolist() == [
        False, True, True, True, False,
    ]  # fmt: skip
    no_null = DeleteKeySet(pa.table({"1": pa.array([5], pa.int32())}))
    assert no_null.matches(pa.table({"1": pa.array([None, 5, 6], pa.int32())})).tolist() == [False, True, False]
    strings = DeleteKeySet(pa.table({"1": pa.array(["a", None])}))
    assert strings.matches(pa.table({"1": pa.array([None, "a", "b"])})).tolist() == [True, True, False]
    pairs = DeleteKeySet(pa.table({"1": [1, 2], "2": ["x", None]}))
    assert pairs.matches(pa.table({"1": [1, 2, 2], "2": ["x", None, "y"]})).tolist() == [True, True, False]
