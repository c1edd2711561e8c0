"""The net-changes rule on hand-built change rows (no Spark): Java's iterator, simulated row by row.

`_java_net` restates Iceberg's RemoveNetCarryoverIterator as its source reads: rows sorted by
data columns, `_change_ordinal`, `_change_type`; a run starts at a row with count 1, an equal
row of the same type adds 1, of the opposite type subtracts 1, and at 0 the run is dropped and
the next row starts afresh; a run that ends emits its first row `count` times. `NetChanges`
must give exactly that multiset (data, type, ordinal, snapshot id) on random histories, while
holding only carry-overs that can matter.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from icetail.reader.changes.net import NetChanges, net_key_columns
from icetail.reader.changes.reconcile import reconcile_snapshot
from icetail.reader.split.metadata_columns import change_schema

SCHEMA = change_schema(pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())]))


def _rows(rows: list[tuple[Any, Any, str, int]]) -> pa.Table:
    """(id, v, type, ordinal) -> change rows; snapshot id 100 + ordinal, time ordinal ms."""
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "v": v,
                "_change_type": t,
                "_change_ordinal": o,
                "_commit_snapshot_id": 100 + o,
                "_commit_timestamp": o * 1000,
            }
            for i, v, t, o in rows
        ],
        schema=SCHEMA,
    )


def _java_net(rows: list[tuple[Any, Any, str, int]]) -> Counter[tuple[Any, ...]]:
    ordered = sorted(rows, key=lambda r: (r[0] is not None, r[0], r[1] is not None, r[1], r[3], r[2]))
    out: Counter[tuple[Any, ...]] = Counter()
    i = 0
    while i < len(ordered):
        first, count, j = ordered[i], 1, i + 1
        while j < len(ordered) and ordered[j][:2] == first[:2]:
            count += 1 if ordered[j][2] == first[2] else -1
            j += 1
            if count == 0:
                break
        if count:
            out[first] += count
        i = j
    return out


def _net(
    snapshots: list[list[tuple[Any, Any, str, int]]], keys: tuple[str, ...] = (), compact_rows: int = 1_000_000
) -> pa.Table:
    net = NetChanges(SCHEMA, compact_rows=compact_rows)
    for snapshot in snapshots:
        net.add_snapshot(_rows(snapshot))
    return net.result(keys)


def _multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter((r["id"], r["v"], r["_change_type"], r["_change_ordinal"]) for r in table.to_pylist())


def test_insert_then_delete_vanishes_and_double_update_is_one_pair() -> None:
    history = [
        [(1, "a", "INSERT", 0), (2, "b", "INSERT", 0)],
        [(1, "a", "DELETE", 1), (2, "b", "DELETE", 1), (2, "c", "INSERT", 1), (3, "x", "INSERT", 1)],
        [(2, "c", "DELETE", 2), (2, "d", "INSERT", 2), (3, "x", "DELETE", 2)],
    ]
    out = _net(history, ("id",))
    assert out.to_pylist() == [
        {
            "id": 2,
            "v": "d",
            "_change_type": "INSERT",
            "_change_ordinal": 2,
            "_commit_snapshot_id": 102,
            "_commit_timestamp": out.column("_commit_timestamp")[0].as_py(),
        },
    ]
    before = [(9, "a", "DELETE", 0), (9, "b", "INSERT", 0)]
    out = _net([before, [(9, "b", "DELETE", 1), (9, "c", "INSERT", 1)]], ("id",))
    assert [(r["id"], r["v"], r["_change_type"], r["_commit_snapshot_id"]) for r in out.to_pylist()] == [
        (9, "a", "UPDATE_BEFORE", 101),
        (9, "c", "UPDATE_AFTER", 101),
    ]


def test_a_carry_over_of_a_row_inserted_in_the_range_moves_it_to_the_rewrite_as_in_java() -> None:
    # (1,a) inserted at 0, its file rewritten at 1 (copy-on-write update of another row)
    history = [
        [(1, "a", "INSERT", 0), (2, "b", "INSERT", 0)],
        [(1, "a", "DELETE", 1), (2, "b", "DELETE", 1), (1, "a", "INSERT", 1), (2, "B", "INSERT", 1)],
    ]
    flat = [r for s in history for r in s]
    assert _multiset(_net(history)) == _java_net(flat)
    assert (1, "a", "INSERT", 1) in _java_net(flat)


def test_without_keys_updates_stay_delete_and_insert() -> None:
    out = _net([[(1, "a", "DELETE", 0), (1, "b", "INSERT", 0)]])
    assert sorted(r["_change_type"] for r in out.to_pylist()) == ["DELETE", "INSERT"]


def test_a_key_with_two_net_rows_on_a_side_is_not_paired() -> None:
    out = _net([[(1, "a", "DELETE", 0), (1, "b", "INSERT", 0), (1, "c", "INSERT", 1)]], ("id",))
    assert sorted(r["_change_type"] for r in out.to_pylist()) == ["DELETE", "INSERT", "INSERT"]


def test_net_key_columns_is_the_identifier_columns_or_none() -> None:
    assert net_key_columns(SCHEMA, None) == ()
    assert net_key_columns(SCHEMA, ["id"]) == ("id",)
    with pytest.raises(ValueError, match="nope"):
        net_key_columns(SCHEMA, ["nope"])


def _random_history(rng: random.Random, snapshots: int) -> list[list[tuple[Any, Any, str, int]]]:
    """A consistent multiset history: each snapshot deletes some live rows, inserts some, and
    (copy-on-write) rewrites some unchanged rows as DELETE+INSERT carry-overs."""
    live: Counter[tuple[Any, Any]] = Counter((rng.randrange(4), rng.choice("ab")) for _ in range(4))
    history = []
    for ordinal in range(snapshots):
        rows: list[tuple[Any, Any, str, int]] = []
        pool = list(live.elements())
        rng.shuffle(pool)
        deleted = pool[: rng.randrange(len(pool) + 1)] if pool else []
        carried = pool[len(deleted) : len(deleted) + rng.randrange(3)]
        inserted = [(rng.randrange(4), rng.choice(["a", "b", None])) for _ in range(rng.randrange(4))]
        rows += [(*r, "DELETE", ordinal) for r in deleted + carried]
        rows += [(*r, "INSERT", ordinal) for r in carried + inserted]
        live -= Counter(deleted)
        live += Counter(inserted)
        history.append(rows)
    return history


@pytest.mark.parametrize("compact_rows", [1_000_000, 1, 5], ids=["no-compaction", "compact-always", "compact-at-5"])
@pytest.mark.parametrize("seed", range(300))
def test_random_histories_match_java_iterator(seed: int, compact_rows: int) -> None:
    """Also with the held rows compacted to their net rows along the way: the same result."""
    rng = random.Random(seed)
    history = _random_history(rng, rng.randrange(1, 9))
    flat = [r for s in history for r in s]
    assert _multiset(_net(history, compact_rows=compact_rows)) == _java_net(flat), history


@pytest.mark.parametrize("seed", range(100))
def test_random_histories_replay_start_to_end_with_keys(seed: int) -> None:
    """Net rows applied to the rows at the start give the rows at the end; each key in at most one group."""
    rng = random.Random(1000 + seed)
    history = _random_history(rng, rng.randrange(1, 7))
    delta: Counter[tuple[Any, Any]] = Counter()  # rows at the end minus rows at the start, signed
    for snapshot in history:
        for i, v, t, _ in snapshot:
            delta[(i, v)] += 1 if t == "INSERT" else -1
    out = _net(history, ("id",))
    removed = Counter((r["id"], r["v"]) for r in out.to_pylist() if r["_change_type"] in ("DELETE", "UPDATE_BEFORE"))
    added = Counter((r["id"], r["v"]) for r in out.to_pylist() if r["_change_type"] in ("INSERT", "UPDATE_AFTER"))
    assert added == +delta and removed == +Counter({k: -v for k, v in delta.items()})
    types = [r["_change_type"] for r in out.to_pylist()]
    for position, kind in enumerate(types):
        if kind == "UPDATE_BEFORE":
            assert types[position + 1] == "UPDATE_AFTER"


def test_per_snapshot_reconcile_and_net_agree_on_a_single_snapshot() -> None:
    snapshot = [(1, "a", "DELETE", 0), (1, "b", "INSERT", 0), (2, "x", "DELETE", 0), (2, "x", "INSERT", 0)]
    per_snapshot = reconcile_snapshot(_rows(snapshot), ["id"])
    assert _multiset(per_snapshot) == _multiset(_net([snapshot], ("id",)))
