"""Net changes keyed by v3 row lineage, against Java's `_row_id` reads of a range's two ends.

Java Iceberg 1.10 on Spark 3.5 writes the tables (tests/support/lineage_workload.py, then a row
updated twice with its key changed, and a row inserted, re-keyed and deleted): merge-on-read
and copy-on-write UPDATEs of the same row twice, an UPDATE of the key column, a MERGE, DELETEs,
`rewrite_data_files`. For a range (A, B], Java's `SELECT _row_id, ... VERSION AS OF` of A and B
gives the expected net rows: a row id at both ends with other data is one UPDATE pair, only at
A a DELETE, only at B an INSERT. No identifier columns are given. The replay invariant
(tests/differential/test_net_changes.py, `net_problems`) holds too, and `run --net
--with-row-lineage` and the data source's net partition deliver the same rows as the API.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.differential.test_net_changes import net_problems
from tests.support.lineage_workload import (
    DATA,
    LINEAGE,
    STATEMENTS,
    check_pairs_adjacent,
    create_table,
    expected_changes,
    java_rows,
    tuples,
)
from tests.support.workloads import COW, MOR

EXTRA = (
    "UPDATE {cat}.ns.t SET v = 'twice', d = 7D WHERE id = 109",  # 9: re-keyed to 109 before, updated again
    "DELETE FROM {cat}.ns.t WHERE id = 121",  # 21: inserted, re-keyed, deleted
)


def _build(catalog: Any, mode: str, partitioned: bool = False) -> list[int]:
    create_table(catalog, mode, partitioned=partitioned)
    for statement in (*STATEMENTS, *EXTRA):
        catalog.sql(statement)
    return catalog.snapshot_ids("t")


def _lineage_problems(catalog: Any, net: pa.Table, from_id: int | None, to_id: int) -> list[str]:
    """The net rows of (from, to] against Java's rows by `_row_id` at `from` and at `to`."""
    got = Counter(zip(net.column("_change_type").to_pylist(), tuples(net, LINEAGE + DATA), strict=True))
    expected = expected_changes(java_rows(catalog, from_id), java_rows(catalog, to_id))
    problems = [f"net ({from_id}, {to_id}]: {p}" for p in check_pairs_adjacent(net)]
    if got != expected:
        problems.append(f"net ({from_id}, {to_id}] (_change_type, {LINEAGE + DATA}):")
        problems += [f"  icetail only: {n} x {row}" for row, n in sorted((got - expected).items(), key=repr)]
        problems += [f"  java only: {n} x {row}" for row, n in sorted((expected - got).items(), key=repr)]
    return problems


@pytest.mark.java
@pytest.mark.parametrize("mode", [MOR, COW])
def test_net_by_row_id_matches_java_reads_of_the_range_ends(catalog, mode) -> None:
    from icetail.monitor.engine.api import read_changes

    ids = _build(catalog, mode, partitioned=mode == COW)
    table = catalog.load_table("t")
    ranges: list[tuple[int | None, int]] = [(None, ids[-1]), (ids[0], ids[-1]), (ids[1], ids[7]), (ids[4], ids[-1])]
    ranges += [(ids[7], ids[-1]), (ids[0], ids[2])]
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    for from_id, to_id in ranges:
        net = read_changes(table, from_id, to_id, net=True, with_row_lineage=True)
        assert net.column_names[: len(DATA) + 2] == [*DATA, *LINEAGE]
        problems += _lineage_problems(catalog, net, from_id, to_id)
        problems += net_problems(net, catalog, "t", from_id, to_id)
        plain = read_changes(table, from_id, to_id, net=True)
        assert plain.equals(net.drop_columns(list(LINEAGE)))  # the same rows without the lineage columns
        kinds.update(net.column("_change_type").to_pylist())
    assert not problems, "\n".join(problems)
    assert {"UPDATE_BEFORE", "DELETE", "INSERT"} <= set(kinds)

    # the row updated twice with its key changed (9 -> 109 -> 'twice') is one pair; 21 vanished
    whole = read_changes(table, ids[0], ids[-1], net=True, with_row_lineage=True)
    by_id = {r["id"]: r for r in whole.to_pylist()}
    assert (by_id[9]["_change_type"], by_id[109]["_change_type"]) == ("UPDATE_BEFORE", "UPDATE_AFTER")
    assert by_id[9]["_row_id"] == by_id[109]["_row_id"] and by_id[109]["v"] == "twice"
    # stamped with the row's last change: its update, or on copy-on-write the DELETE of 121 that
    # rewrote its file (a carry-over restamps a row changed in the range, as Java's count does)
    last_change = ids[-1] if mode == COW else ids[-2]
    assert by_id[109]["_commit_snapshot_id"] == by_id[9]["_commit_snapshot_id"] == last_change
    assert not {21, 121} & set(by_id)


@pytest.mark.java
def test_data_source_net_partition_keeps_lineage_as_the_api(catalog) -> None:
    from icetail.monitor.engine.api import plan_range, read_changes
    from icetail.monitor.engine.range_bounds import RangeBounds
    from icetail.monitor.engine.spark_source.partitions import plan_partitions, read_partition

    ids = _build(catalog, MOR)
    table = catalog.load_table("t")
    for with_lineage in (True, False):
        plan = plan_range(table, RangeBounds(ids[0], ids[-1]))
        (spec,) = plan_partitions(table, plan, net=True, with_row_lineage=with_lineage)
        rows = pa.Table.from_batches(list(read_partition(spec)))
        expected = read_changes(table, ids[0], ids[-1], net=True, with_row_lineage=with_lineage)
        assert rows.equals(expected.cast(rows.schema))
        assert (LINEAGE[0] in rows.column_names) == with_lineage


@pytest.mark.java
def test_run_net_with_row_lineage_delivers_the_api_rows_after_a_crash(catalog, spark, tmp_path, monkeypatch) -> None:
    """One net batch of the whole history; its write lands, then the process 'crashes' before the
    commit: the resumed batch writes the same rows under the same key, delivered once."""
    from icetail.monitor.engine.api import read_changes
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline
    from icetail.sinks.files.parquet import ParquetDirSink
    from tests.support.sinks import CrashingSink, SimulatedCrash

    catalog.set_env(monkeypatch)
    ids = _build(catalog, COW)
    config = PipelineConfig(
        catalog.name,
        "ns.t",
        f"sqlite:///{tmp_path}/state.db",
        f"parquet://{tmp_path}/out",
        consumer="c",
        net=True,
        with_row_lineage=True,
        max_snapshots_per_batch=len(ids),
    )
    crashing = CrashingSink(ParquetDirSink(tmp_path / "out", consumer="c"), 1, after_write=True)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()
    written = pq.read_table(tmp_path / "out")
    with Pipeline(config, spark=spark) as second:
        outcomes = second.run()
    assert [(o.resumed, o.completed) for o in outcomes] == [(True, True)]
    delivered = pq.read_table(tmp_path / "out")
    expected = read_changes(catalog.load_table("t"), None, ids[-1], net=True, with_row_lineage=True, spark=spark)
    columns = tuple(c for c in expected.column_names if c != "_commit_timestamp")
    assert delivered.column_names == expected.column_names
    assert sorted(tuples(delivered, columns), key=repr) == sorted(tuples(expected, columns), key=repr)
    assert sorted(tuples(written, columns), key=repr) == sorted(tuples(delivered, columns), key=repr)
    assert not _lineage_problems(catalog, delivered, None, ids[-1])


@pytest.mark.java
def test_worked_example(catalog) -> None:
    """docs/semantics.md, "Keyed by row lineage", row for row (merge-on-read), and by content on v2."""
    from icetail.monitor.engine.api import read_changes
    from tests.support.workloads import table_properties

    statements = (
        "INSERT INTO {cat}.ns.t VALUES (1L, 'a'), (2L, 'b'), (3L, 'c')",
        "UPDATE {cat}.ns.t SET v = 'b2' WHERE id = 2",
        "UPDATE {cat}.ns.t SET id = 20, v = 'b3' WHERE id = 2",
        "INSERT INTO {cat}.ns.t VALUES (4L, 'd')",
        "DELETE FROM {cat}.ns.t WHERE id IN (3, 4)",
    )
    out = {}
    for version, name in ((3, "t"), (2, "t2")):
        props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(version, MOR).items())
        catalog.sql(f"CREATE TABLE {{cat}}.ns.{name} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
        for statement in statements:
            catalog.sql(statement.replace("ns.t ", f"ns.{name} "))
        s1, _, s3, _, s5 = catalog.snapshot_ids(name)
        table = catalog.load_table(name)
        rows = read_changes(table, s1, s5, net=True, with_row_lineage=version == 3)
        out[version] = (s1, s3, s5, rows)
    s1, s3, s5, rows = out[3]
    assert [(r["_change_type"], r["id"], r["v"], r["_row_id"], r["_commit_snapshot_id"]) for r in rows.to_pylist()] == [
        ("UPDATE_BEFORE", 2, "b", 1, s3),
        ("UPDATE_AFTER", 20, "b3", 1, s3),
        ("DELETE", 3, "c", 2, s5),
    ]
    s1, s3, s5, rows = out[2]
    s2 = catalog.snapshot_ids("t2")[1]
    assert [(r["_change_type"], r["id"], r["v"], r["_commit_snapshot_id"]) for r in rows.to_pylist()] == [
        ("DELETE", 2, "b", s2),
        ("INSERT", 20, "b3", s3),
        ("DELETE", 3, "c", s5),
    ]


@pytest.mark.java
def test_changes_cli_takes_net_with_row_lineage(catalog, tmp_path, monkeypatch) -> None:
    from icetail.monitor.cli.main import main
    from icetail.monitor.engine.api import read_changes

    catalog.set_env(monkeypatch)
    ids = _build(catalog, MOR)
    out = tmp_path / "net.parquet"
    args = ["changes", "--catalog", catalog.name, "--table", "ns.t", "--net", "--with-row-lineage"]
    assert main([*args, "--from-snapshot", str(ids[1]), "--output", str(out)]) == 0
    written = pq.read_table(out)
    expected = read_changes(catalog.load_table("t"), ids[1], None, net=True, with_row_lineage=True)
    assert written.column_names == expected.column_names
    assert tuples(written, (*LINEAGE, *DATA, "_change_type")) == tuples(expected, (*LINEAGE, *DATA, "_change_type"))
