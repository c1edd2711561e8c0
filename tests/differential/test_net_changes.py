"""Net changes (`read_changes(..., net=True)`, `icetail changes --net`) against Java.

Copy-on-write tables: row for row equal to Java's own `create_changelog_view(net_changes => true)`
(data columns, _change_type, _change_ordinal, _commit_snapshot_id); Java's procedure does not
read delete files, so that is where it is an oracle. Every table, merge-on-read included (v2
position deletes, v3 deletion vectors, equality deletes): against Java's reads of the range's
two ends, the net rows of (A, B] replayed onto the rows at A give the rows at B, no row is both
removed and added, and a key that is unique at both ends has at most one net change group
(one DELETE, one INSERT, or one UPDATE_BEFORE/UPDATE_AFTER pair).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from tests.support.engines import changes_by_engine, engine_problems
from tests.support.oracle import (
    DELETE_TYPES,
    INSERT_TYPES,
    _diff_lines,
    _schema_of,
    canonical_rows,
    range_snapshots,
    row_tuples,
    rows_at,
)
from tests.support.workloads import COW, MIXED, MOR, Workload, table_properties

META = ("_change_type", "_change_ordinal", "_commit_snapshot_id")


def _java_multiset(table: pa.Table, columns: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(row_tuples(table, [*columns, *META]))


def _compare_with_java(catalog: Any, ident: str, ranges: list[tuple[int | None, int | None]]) -> list[str]:
    from icetail.monitor.engine.api import read_changes

    table = catalog.load_table(ident)
    problems = []
    for from_id, to_id in ranges:
        java = catalog.java_changelog(ident, from_id, to_id, compute_updates=False, net_changes=True)
        ours = read_changes(table, from_id, to_id, net=True)
        columns = [c for c in java.column_names if c not in META]
        a, b = _java_multiset(ours, columns), _java_multiset(java, columns)
        if a != b:
            lines = [f"range ({from_id}, {to_id}] of {catalog.fq(ident)}, columns {[*columns, *META]}:"]
            lines += [f"  icetail only: {n} x {r}" for r, n in sorted((a - b).items(), key=repr)]
            lines += [f"  java only: {n} x {r}" for r, n in sorted((b - a).items(), key=repr)]
            problems.append("\n".join(lines))
    return problems


def net_problems(
    actual: pa.Table, catalog: Any, ident: str, from_id: int | None, to_id: int | None, keys: tuple[str, ...] = ()
) -> list[str]:
    """Every way net rows of (from, to] disagree with Java's reads of `from` and `to`."""
    table = catalog.load_table(ident)
    snaps = range_snapshots(table, from_id, to_id)
    end_id = snaps[-1].snapshot_id if snaps else from_id
    schema = _schema_of(table, end_id)
    names = [f.name for f in schema.fields]
    where = f"{catalog.fq(ident)} net ({from_id}, {to_id}]"
    rows = canonical_rows(actual.select(names), schema, schema)
    types = actual.column("_change_type").to_pylist()
    removed = Counter(r for r, t in zip(rows, types, strict=True) if t in DELETE_TYPES)
    added = Counter(r for r, t in zip(rows, types, strict=True) if t in INSERT_TYPES)
    start, end = rows_at(catalog, ident, from_id, schema), rows_at(catalog, ident, end_id, schema)
    problems = []
    problems += [f"{where}: {line}" for line in _diff_lines("removed", removed, start - end, names)]
    problems += [f"{where}: {line}" for line in _diff_lines("added", added, end - start, names)]
    if removed & added:
        problems.append(f"{where}: rows both removed and added: {dict(removed & added)}")
    known = {s.snapshot_id: s.ordinal for s in snaps}
    sids, ordinals = actual.column("_commit_snapshot_id").to_pylist(), actual.column("_change_ordinal").to_pylist()
    stamped = set(zip(sids, ordinals, strict=True))
    if any(known.get(sid, "missing") != ordinal for sid, ordinal in stamped):
        problems.append(f"{where}: (snapshot, ordinal) stamps {sorted(stamped)} not those of the range {known}")
    if keys:
        key_index = [names.index(k) for k in keys]
        unique_at_ends = Counter(tuple(r[i] for i in key_index) for r in (start + end).elements())
        start_keys = Counter(tuple(r[i] for i in key_index) for r in start.elements())
        end_keys = Counter(tuple(r[i] for i in key_index) for r in end.elements())
        groups: dict[tuple[Any, ...], list[str]] = {}
        for row, kind in zip(rows, types, strict=True):
            groups.setdefault(tuple(row[i] for i in key_index), []).append(kind)
        for key, kinds in groups.items():
            if start_keys[key] <= 1 and end_keys[key] <= 1 and unique_at_ends[key] <= 2:
                if kinds not in (["DELETE"], ["INSERT"], ["UPDATE_BEFORE", "UPDATE_AFTER"]):
                    problems.append(f"{where}: key {key} unique at both ends has net rows {kinds}")
        for i, kind in enumerate(types):
            if kind == "UPDATE_BEFORE" and (i + 1 == len(types) or types[i + 1] != "UPDATE_AFTER"):
                problems.append(f"{where}: UPDATE_BEFORE at row {i} is not followed by its UPDATE_AFTER")
    return problems


def _ranges(ids: list[int], rng: random.Random) -> list[tuple[int | None, int | None]]:
    out: list[tuple[int | None, int | None]] = [(None, None)]
    for _ in range(2):
        a, b = sorted(rng.sample(range(-1, len(ids)), 2))
        out.append((ids[a] if a >= 0 else None, ids[b]))
    return out


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_net_changes_match_java_on_copy_on_write(catalog, partitioned) -> None:
    """Updated twice, inserted then deleted, identical rows inserted twice, NULLs, a no-op update."""
    from icetail.monitor.engine.api import read_changes

    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, COW).items())
    part = " PARTITIONED BY (p)" if partitioned else ""
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string, d double) USING iceberg{part} TBLPROPERTIES ({props})"
    )
    rows = ", ".join(f"({i}L, {i % 2}, 'v{i}', {i}.5D)" for i in range(1, 9))
    for stmt in (
        f"INSERT INTO {{cat}}.ns.t VALUES {rows}",
        "UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id IN (2, 3)",
        "INSERT INTO {cat}.ns.t VALUES (20L, 0, 'tmp', NULL), (21L, 1, 'dup', 1D), (21L, 1, 'dup', 1D)",
        "UPDATE {cat}.ns.t SET v = concat(v, 'w'), d = NULL WHERE id IN (2, 5)",
        "DELETE FROM {cat}.ns.t WHERE id IN (20, 4)",
        "UPDATE {cat}.ns.t SET v = v WHERE id = 6",
        "INSERT INTO {cat}.ns.t VALUES (21L, 1, 'dup', 1D), (4L, 0, 'v4', 4.5D)",
        "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (3L, 'm', 1), (30L, 'n', 1) "
        "AS s(id, v, op)) s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
    ):
        catalog.sql(stmt)
    ids = catalog.snapshot_ids("t")
    ranges = [(None, None), (ids[0], ids[-1]), (ids[1], ids[4]), (ids[2], ids[3])]
    problems = _compare_with_java(catalog, "t", ranges)
    table = catalog.load_table("t")
    for from_id, to_id in ranges:
        out = read_changes(table, from_id, to_id, identifier_columns=["id"], net=True)
        problems += net_problems(out, catalog, "t", from_id, to_id, ("id",))
    full = read_changes(table, ids[0], None, identifier_columns=["id"], net=True)
    pairs = {r["id"]: r["v"] for r in full.to_pylist() if r["_change_type"] == "UPDATE_AFTER"}
    assert pairs.get(2) == "v2uw", full.to_pylist()  # updated twice: one pair, first before-image to last after
    assert 20 not in {r["id"] for r in full.to_pylist()}  # inserted then deleted: gone
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_copy_on_write_workloads_match_java(catalog, seed) -> None:
    w = Workload(catalog, "t", seed=7000 + seed, steps=8, format_version=2, partitioned=seed % 2 == 0, mode=COW,
                 equality_deletes=False, schema_evolution=False, partition_evolution=False)
    ids = w.run()
    problems = _compare_with_java(catalog, "t", _ranges(ids, random.Random(seed)))
    assert not problems, "\n".join(problems) + "\n" + w.describe()


@pytest.mark.parametrize(
    ("format_version", "partitioned", "mode"),
    [
        pytest.param(2, False, MOR, id="v2-position-deletes"),
        pytest.param(3, True, MOR, id="v3-deletion-vectors"),
        pytest.param(3, False, MIXED, id="v3-mixed"),
    ],
)
def test_net_changes_replay_between_snapshot_states(catalog, format_version, partitioned, mode) -> None:
    from icetail.monitor.engine.api import read_changes

    seed = 8000 + format_version * 10 + partitioned
    w = Workload(catalog, "t", seed=seed, steps=9, format_version=format_version, partitioned=partitioned, mode=mode)
    ids = w.run()
    table = catalog.load_table("t")
    problems = []
    for from_id, to_id in _ranges(ids, random.Random(seed)):
        for keys in ((), ("id",)):
            outputs = changes_by_engine(
                read_changes, table, from_id, to_id, identifier_columns=list(keys) or None, net=True
            )
            for engine, out in outputs.items():
                problems += engine_problems(engine, net_problems(out, catalog, "t", from_id, to_id, keys))
    assert not problems, "\n".join(problems) + "\n" + w.describe()


def test_worked_example(catalog) -> None:
    """docs/semantics.md, "Worked example: net changes", row for row, and Java's procedure agrees."""
    from icetail.monitor.engine.api import read_changes

    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, COW).items())
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    for stmt in (
        "INSERT INTO {cat}.ns.t VALUES (1L, 'a'), (2L, 'b')",
        "UPDATE {cat}.ns.t SET v = 'b2' WHERE id = 2",
        "INSERT INTO {cat}.ns.t VALUES (3L, 'c')",
        "UPDATE {cat}.ns.t SET v = 'b3' WHERE id = 2",
        "DELETE FROM {cat}.ns.t WHERE id = 3",
    ):
        catalog.sql(stmt)
    s0, s1, _, s3, _ = catalog.snapshot_ids("t")
    table = catalog.load_table("t")

    def rows(out: pa.Table) -> list[tuple[Any, ...]]:
        return [(r["_change_type"], r["id"], r["v"], r["_commit_snapshot_id"]) for r in out.to_pylist()]

    keyed = read_changes(table, s0, None, identifier_columns=["id"], net=True)
    assert rows(keyed) == [("UPDATE_BEFORE", 2, "b", s3), ("UPDATE_AFTER", 2, "b3", s3)]
    assert rows(read_changes(table, s0, None, net=True)) == [("DELETE", 2, "b", s1), ("INSERT", 2, "b3", s3)]
    assert not _compare_with_java(catalog, "t", [(s0, None)])
