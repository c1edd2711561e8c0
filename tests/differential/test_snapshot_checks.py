"""Every snapshot checks itself, on tables Java Iceberg 1.10 wrote (docs/semantics.md).

For each kind of snapshot (append, copy-on-write overwrite and delete, merge-on-read position
deletes on v2, deletion vectors on v3, equality deletes through the Java API, compaction), the
whole history is read with `--verify strict`: honest tables must give no mismatch, the rules the
summary proves must actually be checked (so the test cannot pass vacuously), and the output
must still match Java's reads snapshot by snapshot.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from icetail.reader.changes.checks import SnapshotCheck
from tests.support.oracle import assert_changes_match
from tests.support.workloads import COW, MIXED, MOR, Workload, table_properties

SINGLE_FILE = "/*+ REPARTITION(1) */"


def _create(catalog: Any, format_version: int, mode: str, partition: str = "") -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(format_version, mode).items())
    part = f" PARTITIONED BY ({partition})" if partition else ""
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string) USING iceberg{part} TBLPROPERTIES ({props})")


def _insert(catalog: Any, values: str) -> int:
    catalog.sql(f"INSERT INTO {{cat}}.ns.t SELECT {SINGLE_FILE} * FROM VALUES {values} AS s(id, p, v)")
    return catalog.current_snapshot_id("t")


def _run(
    catalog: Any, ident: str = "t", verify: str = "strict", **kwargs: Any
) -> tuple[dict[int, SnapshotCheck], Any]:
    """The whole history read (under strict by default); the checks by snapshot id and the output."""
    import pyarrow as pa

    from icetail.monitor.engine.api import iter_changes
    from icetail.monitor.planning.planner import Planner
    from icetail.reader.changes.read_setup import change_arrow_schema

    table = catalog.load_table(ident)
    plan = Planner(table).plan(None, None)
    checks: dict[int, SnapshotCheck] = {}
    record = lambda check: checks.setdefault(check.snapshot_id, check)  # noqa: E731
    batches = list(iter_changes(table, plan, verify=verify, on_check=record, **kwargs))
    out = pa.Table.from_batches(batches, schema=change_arrow_schema(table, plan.schema_id))
    return checks, out


def _operation(catalog: Any, snapshot_id: int, ident: str = "t") -> str:
    snapshot = catalog.load_table(ident).snapshot_by_id(snapshot_id)
    return snapshot.summary.operation.value


def _summary(catalog: Any, snapshot_id: int, ident: str = "t") -> dict[str, str]:
    snapshot = catalog.load_table(ident).snapshot_by_id(snapshot_id)
    return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}


def _describe(catalog: Any, checks: dict[int, SnapshotCheck], ident: str = "t") -> str:
    lines = []
    for snapshot_id in catalog.snapshot_ids(ident):
        check = checks.get(snapshot_id)
        lines.append(f"{snapshot_id} {_summary(catalog, snapshot_id, ident)} -> {check}")
    return "\n".join(lines)


def test_copy_on_write_v2_every_snapshot_checked(catalog: Any) -> None:
    _create(catalog, 2, COW)
    s1 = _insert(catalog, "(1, 1, 'a'), (2, 1, 'b'), (3, 2, 'c')")
    s2 = _insert(catalog, "(4, 2, 'd'), (5, 2, 'e')")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'B' WHERE id = 2")
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 4")
    s4 = catalog.current_snapshot_id("t")
    catalog.sql(
        "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1, 1, 'A'), (9, 9, 'z') AS s(id, p, v)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    s5 = catalog.current_snapshot_id("t")
    catalog.sql("CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))")
    s6 = catalog.current_snapshot_id("t")
    checks, out = _run(catalog)
    described = _describe(catalog, checks)
    assert _operation(catalog, s3) == "overwrite" and _operation(catalog, s6) == "replace", described
    every = {"added-records", "deleted-records", "total-records"}
    assert {s: set(checks[s].rules) for s in (s1, s2)} == {s1: every, s2: every}, described
    for snapshot_id in (s3, s4, s5):  # copy-on-write: the raw counts include the carried-over rows
        assert set(checks[snapshot_id].rules) == every, described
        assert checks[snapshot_id].deletes > 0, described
    assert s6 not in checks or not checks[s6].rules, described  # compaction changes no row
    assert all(not c.mismatches for c in checks.values()), described
    assert_changes_match(out, catalog, "t")


def test_merge_on_read_v2_position_deletes(catalog: Any) -> None:
    """v2 position deletes: Spark rewrites a file's delete file on each delete, so added-position-deletes
    repeats positions; no rule uses it, and the snapshots that add no delete still check."""
    _create(catalog, 2, MOR)
    s1 = _insert(catalog, "(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c'), (4, 1, 'd')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    s2 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 3")
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'A' WHERE id = 1")
    s4 = catalog.current_snapshot_id("t")
    s5 = _insert(catalog, "(5, 1, 'e')")
    catalog.sql("CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))")
    checks, out = _run(catalog)
    described = _describe(catalog, checks)
    assert int(_summary(catalog, s3)["added-position-deletes"]) == 2, described  # {2, 3}: position of id 2 again
    assert set(checks[s1].rules) == {"added-records", "deleted-records", "total-records"}, described
    assert not checks[s2].rules and not checks[s3].rules, described  # nothing exact about v2 position deletes
    assert checks[s5].rules == ("added-records",), described  # the parent has delete files
    assert s4 in checks, described
    assert all(not c.mismatches for c in checks.values()), described
    assert_changes_match(out, catalog, "t")


def test_merge_on_read_v3_deletion_vectors(catalog: Any) -> None:
    _create(catalog, 3, MOR, partition="p")
    _insert(catalog, "(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c'), (4, 2, 'd'), (5, 2, 'e'), (6, 2, 'f')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    s2 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id IN (3, 5)")  # replaces p=1's DV, adds p=2's
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'A' WHERE id = 1")
    s4 = catalog.current_snapshot_id("t")
    catalog.sql("CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 4")
    s6 = catalog.current_snapshot_id("t")
    checks, out = _run(catalog)
    described = _describe(catalog, checks)
    summary3 = _summary(catalog, s3)
    assert summary3.get("removed-dvs") == "1" and summary3["added-position-deletes"] == "3", described
    for snapshot_id in (s2, s3, s4, s6):  # s4: a merge-on-read UPDATE adds a data file and a DV
        assert checks[snapshot_id].rules == ("dv-net",), described
    assert all(not c.mismatches for c in checks.values()), described
    assert_changes_match(out, catalog, "t")


def test_equality_deletes_written_through_java(catalog: Any) -> None:
    _create(catalog, 2, MOR)
    _insert(catalog, "(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c')")
    catalog.write_equality_deletes("t", "SELECT 2 AS id")
    s2 = catalog.current_snapshot_id("t")
    data = catalog.write_data_file("t", "SELECT 2L AS id, 1 AS p, 'z' AS v")  # an upsert: key deleted, row added
    deletes = catalog.write_equality_deletes("t", "SELECT 3 AS id", commit=False)
    delta = catalog.java_table("t").newRowDelta().addRows(data)
    for delete in deletes:
        delta = delta.addDeletes(delete)
    delta.commit()
    s3 = catalog.current_snapshot_id("t")
    s4 = _insert(catalog, "(7, 1, 'g')")
    checks, out = _run(catalog)
    described = _describe(catalog, checks)
    assert checks[s2].rules == ("added-records",), described  # 0 inserts; deletes by key are not counted rows
    assert checks[s3].rules == ("added-records",) and checks[s3].inserts == 1, described
    assert checks[s4].rules == ("added-records",), described
    assert all(not c.mismatches for c in checks.values()), described
    assert_changes_match(out, catalog, "t")


@pytest.mark.parametrize(
    ("format_version", "mode", "partitioned", "seed"),
    [(2, MIXED, True, 11), (2, MOR, False, 12), (3, MIXED, True, 13), (3, COW, False, 14)],
)
def test_random_workloads_never_mismatch(
    catalog: Any, format_version: int, mode: str, partitioned: bool, seed: int
) -> None:
    """Random Java workloads (inserts, deletes, updates, merges, overwrites, compaction, equality
    deletes, schema and partition evolution): no snapshot fails its summary."""
    workload = Workload(
        catalog, "w", seed=random.Random(seed).randrange(10**6), steps=10, format_version=format_version,
        partitioned=partitioned, mode=mode,
    )
    workload.run()
    checks, _ = _run(catalog, "w")
    described = workload.describe() + "\n" + _describe(catalog, checks, "w")
    assert all(not c.mismatches for c in checks.values()), described
    assert sum(1 for c in checks.values() if c.rules) >= 2, described


def test_a_writer_that_miscounts_its_file_is_caught(catalog: Any) -> None:
    """A real lie, through the Java API: a data file committed with a wrong record_count (Java's
    summary sums the manifests' counts). Java's own reader returns the file's real rows, as icetail
    does; strict refuses the snapshot, warn delivers it as read."""
    from icetail.monitor.engine.api import read_changes
    from icetail.monitor.engine.verify import SnapshotCheckError

    _create(catalog, 2, MOR)
    _insert(catalog, "(1, 1, 'a'), (2, 1, 'b')")
    honest = catalog.write_data_file("t", "SELECT * FROM VALUES (3L, 1, 'c'), (4L, 1, 'd') AS s(id, p, v)")
    jvm = catalog.spark._jvm
    table = catalog.java_table("t")
    lying = jvm.org.apache.iceberg.DataFiles.builder(table.spec()).copy(honest).withRecordCount(3).build()
    table.newAppend().appendFile(lying).commit()
    s2 = catalog.current_snapshot_id("t")
    assert _summary(catalog, s2)["added-records"] == "3"
    assert catalog.snapshot_rows("t", s2).table.num_rows == 4  # Java reads the file's 4 rows
    with pytest.raises(SnapshotCheckError, match=f"snapshot {s2} fails summary rule added-records: its summary says 3"):
        read_changes(catalog.load_table("t"), verify="strict")
    checks, out = _run(catalog, verify="warn")
    assert [m.rule for m in checks[s2].mismatches] == ["added-records", "total-records"]
    assert_changes_match(out, catalog, "t")



def test_full_and_direct_diff_plans_are_not_checked_as_snapshots(catalog: Any) -> None:
    """A start from a full snapshot lists every live file as added, a repair diffs two snapshots:
    neither reads a snapshot as its commit wrote it, so the snapshot's summary proves nothing there."""
    import pyarrow as pa

    from icetail.monitor.engine.api import iter_changes
    from icetail.monitor.planning.planner import Planner

    _create(catalog, 2, COW)
    s1 = _insert(catalog, "(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c')")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'B' WHERE id = 2")  # removes the file, adds its rewrite
    s2 = catalog.current_snapshot_id("t")
    table = catalog.load_table("t")
    planner = Planner(table)
    for plan in (planner.plan_full(s2), planner.plan_direct(s1, s2)):
        checks: list[SnapshotCheck] = []
        rows = pa.Table.from_batches(list(iter_changes(table, plan, verify="strict", on_check=checks.append)))
        assert checks == [] and rows.num_rows > 0
    checks, _ = _run(catalog)
    assert "deleted-records" in checks[s2].rules  # read as itself, the same snapshot is checked
