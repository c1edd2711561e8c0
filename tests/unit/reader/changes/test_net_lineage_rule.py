"""Net changes keyed by v3 row lineage (`NetChanges(row_lineage=True)`) on hand-built rows (no Spark).

Per `_row_id`, the first and the last change of the range decide: there at the start and the
end with other data, one UPDATE pair (first before-image, last after-image); only at the start,
a DELETE; only at the end, an INSERT; neither, nothing. Then identical DELETE/INSERT rows that no
row id pairs cancel; rows without a row id fall back to Java's count (tests/unit/reader/changes/test_net_rule.py).
A random history is checked against the rows by row id at its two ends, compacting or not.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from icetail.reader.changes.net import NetChanges
from icetail.reader.split.metadata_columns import change_schema
from icetail.reader.split.row_lineage import LINEAGE_FIELDS

SCHEMA = change_schema(pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), *LINEAGE_FIELDS]))
Change = tuple[int | None, Any, Any, str, int]  # (_row_id, id, v, type, ordinal)


def _rows(rows: list[Change]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "id": i,
                "v": v,
                "_row_id": r,
                "_last_updated_sequence_number": None if r is None else o,
                "_change_type": t,
                "_change_ordinal": o,
                "_commit_snapshot_id": 100 + o,
                "_commit_timestamp": o * 1000,
            }
            for r, i, v, t, o in rows
        ],
        schema=SCHEMA,
    )


def _net(snapshots: list[list[Change]], keys: tuple[str, ...] = (), compact_rows: int = 1_000_000) -> list[tuple]:
    net = NetChanges(SCHEMA, compact_rows=compact_rows, row_lineage=True)
    for snapshot in snapshots:
        net.add_snapshot(_rows(snapshot))
    out = net.result(keys)
    return [(r["_change_type"], r["_row_id"], r["id"], r["v"], r["_change_ordinal"]) for r in out.to_pylist()]


def test_a_row_updated_twice_with_its_key_changed_is_one_update_pair() -> None:
    history = [
        [(0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)],
        [(0, 1, "b", "DELETE", 2), (0, 10, "b", "INSERT", 2)],  # the key changes: the same row
    ]
    assert _net(history) == [("UPDATE_BEFORE", 0, 1, "a", 2), ("UPDATE_AFTER", 0, 10, "b", 2)]


def test_inserted_then_deleted_vanishes_and_updated_back_is_nothing() -> None:
    history = [
        [(5, 5, "x", "INSERT", 1), (0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)],
        [(5, 5, "x", "DELETE", 2), (0, 1, "b", "DELETE", 2), (0, 1, "a", "INSERT", 2)],
    ]
    assert _net(history) == []


def test_identical_rows_with_different_row_ids_cancel_unless_a_row_id_pairs_them() -> None:
    """Deleted, then inserted again identical under a new row id (or rewritten by a writer that does not
    keep lineage): the same content removed and added, no change. A row id's own pair is kept."""
    history = [[(0, 1, "a", "DELETE", 1)], [(7, 1, "a", "INSERT", 2)]]
    assert _net(history) == []
    history = [
        [(0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)],  # row 0: a -> b
        [(7, 1, "a", "INSERT", 2)],  # a new row identical to row 0's before-image
    ]
    assert _net(history) == [("UPDATE_BEFORE", 0, 1, "a", 1), ("UPDATE_AFTER", 0, 1, "b", 1), ("INSERT", 7, 1, "a", 2)]


def test_a_rewrite_that_loses_lineage_keeps_following_the_row() -> None:
    """Row 0 updated, then rewritten under row id 9 (an INSERT OVERWRITE: a carry-over by content),
    then updated again: one pair from its first to its last image."""
    history = [
        [(0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)],
        [(0, 1, "b", "DELETE", 2), (9, 1, "b", "INSERT", 2), (3, 3, "c", "DELETE", 2), (8, 3, "c", "INSERT", 2)],
        [(9, 1, "b", "DELETE", 3), (9, 1, "z", "INSERT", 3), (8, 3, "c", "DELETE", 3), (8, 3, "d", "INSERT", 3)],
    ]
    assert _net(history) == [
        ("UPDATE_BEFORE", 0, 1, "a", 3),
        ("UPDATE_AFTER", 9, 1, "z", 3),
        ("UPDATE_BEFORE", 8, 3, "c", 3),  # row 3 was not changed before its rewrite: followed as row 8
        ("UPDATE_AFTER", 8, 3, "d", 3),
    ]


def test_a_deleted_and_a_new_row_of_one_key_pair_by_identifier_columns() -> None:
    history = [[(0, 1, "a", "DELETE", 1)], [(7, 1, "z", "INSERT", 2)]]
    assert _net(history) == [("DELETE", 0, 1, "a", 1), ("INSERT", 7, 1, "z", 2)]
    assert _net(history, ("id",)) == [("UPDATE_BEFORE", 0, 1, "a", 2), ("UPDATE_AFTER", 7, 1, "z", 2)]


def test_a_carry_over_restamps_a_row_changed_earlier_as_javas_count_does() -> None:
    history = [
        [(3, 3, "c", "INSERT", 1)],
        [(3, 3, "c", "DELETE", 2), (3, 3, "c", "INSERT", 2)],  # copy-on-write rewrite, lineage kept
        [(4, 4, "d", "DELETE", 3), (4, 4, "d", "INSERT", 3)],  # carry-over of a row untouched in the range
    ]
    assert _net(history) == [("INSERT", 3, 3, "c", 2)]


def test_a_deleted_row_keeps_its_first_image_and_its_last_commit() -> None:
    history = [[(0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)], [(0, 1, "b", "DELETE", 3)]]
    assert _net(history) == [("DELETE", 0, 1, "a", 3)]


def test_rows_without_a_row_id_fall_back_to_the_count() -> None:
    """Pre-upgrade rows (null `_row_id`): identical rows cancel, identifier columns pair."""
    history = [
        [(None, 1, "a", "DELETE", 1), (None, 2, "b", "INSERT", 1)],
        [(None, 2, "b", "DELETE", 2), (None, 9, "z", "DELETE", 2), (8, 9, "z2", "INSERT", 2)],
    ]
    assert _net(history) == [("DELETE", None, 1, "a", 1), ("DELETE", None, 9, "z", 2), ("INSERT", 8, 9, "z2", 2)]
    keyed = _net(history, ("id",))
    assert keyed == [("DELETE", None, 1, "a", 1), ("UPDATE_BEFORE", None, 9, "z", 2), ("UPDATE_AFTER", 8, 9, "z2", 2)]


def _random_history(
    rng: random.Random, snapshots: int
) -> tuple[dict[int, tuple[Any, ...]], list[list[Change]], dict[int, tuple[Any, ...]]]:
    """A table of rows by row id; each snapshot updates, deletes, inserts and rewrites some of them.

    New rows are often identical to others, but never to one deleted in the same snapshot: that is
    a rewrite that lost lineage (`test_a_rewrite_that_loses_lineage_keeps_following_the_row`).
    """
    state = {r: (r % 4, f"v{r}") for r in range(12)}
    start = dict(state)
    next_id = 100
    history: list[list[Change]] = []
    for o in range(1, snapshots + 1):
        changes: list[Change] = []
        deleted: set[tuple[Any, ...]] = set()
        for r in sorted(state):
            roll = rng.random()
            if roll < 0.2:
                new = (rng.randrange(4), rng.choice(["a", "b", f"v{r}"]))  # the key may change too
                changes += [(r, *state[r], "DELETE", o), (r, *new, "INSERT", o)]
                state[r] = new
            elif roll < 0.3:
                deleted.add(state[r])
                changes.append((r, *state.pop(r), "DELETE", o))
            elif roll < 0.4:
                changes += [(r, *state[r], "DELETE", o), (r, *state[r], "INSERT", o)]  # carry-over
        for _ in range(rng.randrange(3)):
            new = (rng.randrange(4), rng.choice(["a", "b"]))  # often identical to another row
            if new in deleted:
                continue
            state[next_id] = new
            changes.append((next_id, *new, "INSERT", o))
            next_id += 1
        history.append(changes)
    return start, history, state


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_match_the_rows_by_row_id_at_both_ends(seed: int) -> None:
    rng = random.Random(seed)
    start, history, end = _random_history(rng, rng.randrange(1, 7))
    pairs: set[tuple[Any, ...]] = set()
    deleted: list[tuple[Any, ...]] = []
    inserted: list[tuple[Any, ...]] = []
    for r in start.keys() | end.keys():
        if r in start and r in end and start[r] != end[r]:
            pairs |= {("UPDATE_BEFORE", r, *start[r]), ("UPDATE_AFTER", r, *end[r])}
        elif r in start and r not in end:
            deleted.append(start[r])
        elif r in end and r not in start:
            inserted.append(end[r])
    # by row id, then identical DELETE/INSERT rows no row id pairs cancel as a multiset
    removed, added = Counter(deleted) - Counter(inserted), Counter(inserted) - Counter(deleted)
    for compact_rows in (1, 1_000_000):
        rows = _net(history, compact_rows=compact_rows)
        assert {row[:4] for row in rows if row[0].startswith("UPDATE")} == pairs
        assert Counter(row[2:4] for row in rows if row[0] == "DELETE") == removed
        assert Counter(row[2:4] for row in rows if row[0] == "INSERT") == added
        assert len(rows) == len(pairs) + removed.total() + added.total()
        kinds = [row[0] for row in rows]
        for i, kind in enumerate(kinds):
            if kind == "UPDATE_BEFORE":
                assert kinds[i + 1] == "UPDATE_AFTER" and rows[i][1] == rows[i + 1][1]
