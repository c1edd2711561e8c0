"""The partitioned net fold's stages (reader/changes/net_shuffle_tasks.py) against the driver fold, without Spark.

The stages are run here as Spark runs them: records grouped by their target partition between
stages (what `partitionBy` with the identity does), every partition's task in turn. Random
histories (tests/unit/reader/changes/test_net_rule.py, test_net_lineage_rule.py: carry-overs, identical rows,
changed keys, rows without a row id, rewrites that lose lineage) in 1, 3 and 7 partitions must
give the driver fold's rows exactly, as multisets of full rows (stamps and row ids included),
unless the driver fold followed a row across lost lineage: then, and only then, output
`first_output` carries the not-exact flag.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pytest

from icetail.reader.changes.net import NetChanges, data_columns
from icetail.reader.changes.net_shuffle import NetShuffleSpec
from icetail.reader.changes.net_shuffle_tasks import lineage_stage, net_output_task, routed
from icetail.reader.changes.shuffle_tasks import with_order
from tests.unit.reader.changes.test_net_lineage_rule import SCHEMA as LINEAGE_SCHEMA
from tests.unit.reader.changes.test_net_lineage_rule import _random_history as lineage_history
from tests.unit.reader.changes.test_net_lineage_rule import _rows as lineage_rows
from tests.unit.reader.changes.test_net_rule import _random_history as content_history
from tests.unit.reader.changes.test_net_rule import _rows as content_rows

ROWS_PER_READ = 3  # read chunks of a few rows: pieces of one snapshot come from several "reads"


def _spec(schema: pa.Schema, snapshots: Sequence[pa.Table], partitions: int, keys: tuple[str, ...], lineage: bool):
    whole = frozenset(
        int(t.column("_commit_snapshot_id")[0].as_py())
        for t in snapshots
        if t.num_rows and {"DELETE", "INSERT"} <= set(t.column("_change_type").to_pylist())
    )
    return NetShuffleSpec(
        requests=(),
        split_indexes=(),
        partitions=partitions,
        read_schema=schema,
        key_columns=keys or tuple(data_columns(schema)),
        pair_columns=keys,
        whole_snapshots=whole,
        row_lineage=lineage,
        output_lineage=True,
    )


def _shuffled(records: Iterable[tuple[int, Any]], partitions: int) -> list[list[tuple[int, Any]]]:
    by_target: dict[int, list[tuple[int, Any]]] = defaultdict(list)
    for target, record in records:
        assert 0 <= target < partitions
        by_target[target].append((target, record))
    return [by_target[p] for p in range(partitions)]


def _folded_in_partitions(spec: NetShuffleSpec, snapshots: Sequence[pa.Table]) -> pa.Table | None:
    """The net rows of all outputs, or None when the fold is flagged not exact."""
    records = []
    for split_index, table in enumerate(snapshots):  # a split per snapshot, read a few rows at a time
        for start in range(0, table.num_rows, ROWS_PER_READ):
            rows = with_order(table.slice(start, ROWS_PER_READ), split_index, start)
            records += routed(spec, rows, (0, split_index, start))
    partitions = _shuffled(records, spec.partitions)
    if spec.row_lineage:
        for stage in ("A", "B", "C"):
            out = [r for p, part in enumerate(partitions) for r in lineage_stage(spec, stage, p, part)]
            partitions = _shuffled(out, spec.partitions)
    outputs = [o for i, part in enumerate(partitions) for o in net_output_task(spec, i, part)]
    assert [o.index for o in outputs] == list(range(spec.partitions))
    if any(o.not_exact for o in outputs):
        assert outputs[0].not_exact and not any(o.not_exact for o in outputs[1:])
        return None
    tables = [o.rows() for o in outputs]
    return pa.concat_tables([t for t in tables if t is not None] or [spec.read_schema.empty_table()])


def _driver(schema: pa.Schema, snapshots: Sequence[pa.Table], keys: tuple[str, ...], lineage: bool):
    net = NetChanges(schema, row_lineage=lineage)
    for table in snapshots:
        if {"DELETE", "INSERT"} <= set(table.column("_change_type").to_pylist()):
            net.add_snapshot(table)
        else:
            net.add_rows(table)
    return net, net.result(keys)


def _multiset(rows: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows.to_pylist())


def _check(schema: pa.Schema, snapshots: list[pa.Table], keys: tuple[str, ...], lineage: bool) -> bool:
    """Every partition count gives the driver's rows; True when the fold was flagged not exact."""
    net, expected = _driver(schema, snapshots, keys, lineage)
    flagged = []
    for partitions in (1, 3, 7):
        got = _folded_in_partitions(_spec(schema, snapshots, partitions, keys, lineage), snapshots)
        flagged.append(got is None)
        if got is not None:
            assert _multiset(got) == _multiset(expected), (partitions, snapshots)
    moved = bool(getattr(net, "_first_id", {}))  # the driver followed a row across lost lineage
    assert flagged == [moved] * 3
    return moved


@pytest.mark.parametrize("keys", [("id",), ()], ids=["identifiers", "content"])
@pytest.mark.parametrize("seed", range(30))
def test_random_content_histories_fold_alike_in_partitions(seed: int, keys: tuple[str, ...]) -> None:
    rng = random.Random(seed)
    history = content_history(rng, rng.randrange(1, 9))
    snapshots = [content_rows(s) for s in history if s]
    schema = snapshots[0].schema if snapshots else None
    if schema is None:
        return
    assert not _check(schema, snapshots, keys, lineage=False)


@pytest.mark.parametrize("keys", [("id",), ()], ids=["identifiers", "no-identifiers"])
@pytest.mark.parametrize("seed", range(40))
def test_random_lineage_histories_fold_alike_in_partitions(seed: int, keys: tuple[str, ...]) -> None:
    rng = random.Random(seed)
    _, history, _ = lineage_history(rng, rng.randrange(1, 7))
    lost = rng.random() < 0.3  # some row ids lost: rows written before the table was v3
    snapshots = []
    for changes in history:
        if not changes:
            continue
        if lost:
            changes = [(None if r % 5 == 0 else r, *rest) for r, *rest in changes]
        snapshots.append(lineage_rows(changes))
    if snapshots:
        _check(LINEAGE_SCHEMA, snapshots, keys, lineage=True)


@pytest.mark.parametrize("seed", range(30))
def test_random_rewrites_that_lose_lineage_are_flagged_exactly_when_the_driver_follows_them(seed: int) -> None:
    """Each snapshot updates, deletes, inserts, or rewrites rows under new row ids (lost lineage)."""
    rng = random.Random(5000 + seed)
    state = {r: (r % 3, f"v{r % 4}") for r in range(8)}
    next_id, snapshots, moved = 100, [], 0
    for o in range(1, rng.randrange(2, 7)):
        changes: list[tuple[Any, ...]] = []
        for r in sorted(state):
            roll = rng.random()
            if roll < 0.2:
                new = (state[r][0], rng.choice(["a", "b"]))
                changes += [(r, *state[r], "DELETE", o), (r, *new, "INSERT", o)]
                state[r] = new
            elif roll < 0.35:  # rewritten under a new row id
                changes += [(r, *state[r], "DELETE", o), (next_id, *state[r], "INSERT", o)]
                state[next_id] = state.pop(r)
                next_id += 1
            elif roll < 0.45:
                changes.append((r, *state.pop(r), "DELETE", o))
        if rng.random() < 0.5:
            state[next_id] = (rng.randrange(3), "a")
            changes.append((next_id, *state[next_id], "INSERT", o))
            next_id += 1
        if changes:
            snapshots.append(lineage_rows(changes))
    if snapshots:
        for keys in (("id",), ()):
            moved += _check(LINEAGE_SCHEMA, snapshots, keys, lineage=True)


def test_a_rewrite_that_loses_lineage_of_a_changed_row_is_flagged() -> None:
    history = [
        [(0, 1, "a", "DELETE", 1), (0, 1, "b", "INSERT", 1)],  # row 0 changed
        [(0, 1, "b", "DELETE", 2), (7, 1, "b", "INSERT", 2)],  # rewritten under row id 7
        [(7, 1, "b", "DELETE", 3), (7, 1, "c", "INSERT", 3)],  # and changed again
    ]
    assert _check(LINEAGE_SCHEMA, [lineage_rows(s) for s in history], (), lineage=True)
    unchanged = [history[1], history[2]]  # row 0 not changed before the rewrite: nothing to follow
    assert not _check(LINEAGE_SCHEMA, [lineage_rows(s) for s in unchanged], (), lineage=True)
