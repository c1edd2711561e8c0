"""The Java reference harness itself: jars, shared catalog, snapshot reads, workloads, oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support import oracle
from tests.support.javaref import iceberg_runtime_jar
from tests.support.shade_jackson import (
    class_references,
    pyspark_jackson_jars,
    relocate_class,
    shaded_jackson_jar,
    utf8_constants,
)
from tests.support.workloads import COW, MOR, Workload

MOR_V2 = (
    "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"
)

# -- jars (no JVM) ------------------------------------------------------------------------------


def test_shaded_jackson_relocates_everything(tmp_path: Path) -> None:
    jar = shaded_jackson_jar(cache_dir=tmp_path)
    built = jar.stat().st_mtime_ns
    assert shaded_jackson_jar(cache_dir=tmp_path) == jar  # cached: the same file, not built again
    assert jar.stat().st_mtime_ns == built
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class" in names
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/datatype/jsr310/JavaTimeModule.class" in names
        assert not [n for n in names if n.startswith("com/")]
        service = "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory"
        assert z.read(service).decode().strip() == "org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory"
        for name in sorted(n for n in names if n.endswith(".class"))[::25]:
            data = z.read(name)
            for value in utf8_constants(data).values():
                stripped = value.replace(b"org/apache/iceberg/shaded/com/fasterxml/jackson/", b"").replace(
                    b"org.apache.iceberg.shaded.com.fasterxml.jackson.", b""
                )
                assert b"com/fasterxml/jackson/" not in stripped, (name, value)
                assert b"com.fasterxml.jackson." not in stripped, (name, value)


def test_relocation_is_idempotent_and_keeps_other_bytes() -> None:
    core = next(p for p in pyspark_jackson_jars() if p.name.startswith("jackson-core"))
    with zipfile.ZipFile(core) as z:
        data = z.read("com/fasterxml/jackson/core/JsonFactoryBuilder.class")
    once = relocate_class(data)
    assert relocate_class(once) == once
    refs = class_references(once)
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/TSFBuilder" in refs
    assert not [r for r in refs if r.startswith("com/fasterxml")]
    # everything after the constant pool is byte-identical
    from tests.support.shade_jackson import constant_pool_end

    assert data[constant_pool_end(data):] == once[constant_pool_end(once):]


def test_runtime_jar_contains_extensions_procedures_and_jdbc_catalog() -> None:
    with zipfile.ZipFile(iceberg_runtime_jar()) as z:
        names = set(z.namelist())
    for cls in (
        "org/apache/iceberg/spark/extensions/IcebergSparkSessionExtensions",
        "org/apache/iceberg/spark/procedures/CreateChangelogViewProcedure",
        "org/apache/iceberg/spark/procedures/RewriteDataFilesProcedure",
        "org/apache/iceberg/spark/procedures/RewritePositionDeleteFilesProcedure",
        "org/apache/iceberg/jdbc/JdbcCatalog",
        "org/apache/iceberg/data/GenericAppenderFactory",
        "org/apache/iceberg/spark/SparkValueConverter",
    ):
        assert cls + ".class" in names, cls
    # the stripped part: this is why shade_jackson exists
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" not in names


# -- Java writes, pyiceberg reads ----------------------------------------------------------------


def test_java_writes_pyiceberg_reads_same_snapshots_and_files(catalog) -> None:
    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint, v string) USING iceberg " + MOR_V2)
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (3, 'c'), (4, NULL)")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (5, 'e'), (6, 'f')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'z' WHERE id IN (3, 5)")

    java = catalog.java_table("t")
    java_snaps = [
        (s.snapshotId(), s.parentId(), s.operation())
        for s in catalog.spark._jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists.newArrayList(
            java.snapshots()
        )
    ]
    table = catalog.load_table("t")
    py_snaps = [(s.snapshot_id, s.parent_snapshot_id, s.summary.operation.value) for s in table.snapshots()]
    assert py_snaps == java_snaps
    assert [op for _, _, op in py_snaps] == ["append", "append", "delete", "overwrite"]
    assert catalog.snapshot_ids("t") == [s[0] for s in py_snaps]
    assert table.metadata.format_version == 2

    for snap_id in catalog.snapshot_ids("t"):
        py_files = {
            (task.file.file_path, frozenset(d.file_path for d in task.delete_files))
            for task in table.scan(snapshot_id=snap_id).plan_files()
        }
        assert py_files == catalog.java_planned_files("t", snap_id), snap_id
    assert any(deletes for _, deletes in catalog.java_planned_files("t"))

    java_rows = catalog.snapshot_rows("t", table.current_snapshot().snapshot_id)
    py_rows = table.scan().to_arrow()
    assert Counter(oracle.row_tuples(py_rows, ["id", "v"])) == Counter(oracle.row_tuples(java_rows.table, ["id", "v"]))
    assert Counter(oracle.row_tuples(java_rows.table)) == Counter(
        [(1, "a"), (3, "z"), (3, "z"), (4, None), (5, "z"), (6, "f")]
    )


def test_catalog_rows_visible_both_ways(catalog) -> None:
    # Java -> pyiceberg
    catalog.sql("CREATE NAMESPACE {cat}.fromjava")
    catalog.sql("CREATE TABLE {cat}.fromjava.t (id bigint) USING iceberg")
    assert ("fromjava",) in catalog.pyiceberg.list_namespaces()
    assert ("fromjava", "t") in catalog.pyiceberg.list_tables("fromjava")
    # pyiceberg -> Java
    catalog.pyiceberg.create_namespace("frompy")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    tbl = catalog.pyiceberg.create_table("frompy.t", schema=schema)
    tbl.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    namespaces = {r[0] for r in catalog.rows("SHOW NAMESPACES IN {cat}")}
    assert {"ns", "fromjava", "frompy"} <= namespaces
    assert sorted(tuple(r) for r in catalog.rows("SELECT id, v FROM {cat}.frompy.t")) == [(1, "a"), (2, "b")]


def test_env_lets_a_subprocess_load_the_catalog(catalog) -> None:
    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint) USING iceberg")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (7)")
    env = {**os.environ, **catalog.env()}
    code = (
        "import json, sys; from pyiceberg.catalog import load_catalog; "
        f"t = load_catalog({catalog.name!r}).load_table('ns.t'); "
        "print(json.dumps([t.current_snapshot().snapshot_id, t.scan().to_arrow().column('id').to_pylist()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    snap_id, ids = json.loads(out.stdout)
    assert snap_id == catalog.current_snapshot_id("t")
    assert ids == [7]


def test_set_env_in_process(catalog, monkeypatch) -> None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config

    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint) USING iceberg")
    catalog.set_env(monkeypatch)
    properties = Config().get_catalog_config(catalog.name)  # what icetail's open_catalog does
    assert properties == {"type": "sql", "uri": catalog.uri, "warehouse": catalog.warehouse}
    assert load_catalog(catalog.name, **properties).load_table("ns.t").metadata.format_version == 2


def test_snapshot_rows_use_each_snapshots_schema(catalog) -> None:
    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint, n int, v string) USING iceberg")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1, 10, 'a')")
    first = catalog.current_snapshot_id("t")
    catalog.sql("ALTER TABLE {cat}.ns.t RENAME COLUMN v TO w")
    catalog.sql("ALTER TABLE {cat}.ns.t ALTER COLUMN n TYPE bigint")
    catalog.sql("ALTER TABLE {cat}.ns.t ADD COLUMN e string")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (2, 20, 'b', 'x')")
    second = catalog.current_snapshot_id("t")

    old = catalog.snapshot_rows("t", first)
    new = catalog.snapshot_rows("t", second)
    assert old.table.column_names == ["id", "n", "v"]
    assert old.field_ids == {1: "id", 2: "n", 3: "v"}
    assert old.table.schema.field("n").type == pa.int32()
    assert new.field_ids == {1: "id", 2: "n", 3: "w", 4: "e"}
    assert new.table.schema.field("n").type == pa.int64()
    assert oracle.field_id_of(new.table.schema.field("w")) == 3
    projected = oracle.project_rows(old, new.schema)
    assert projected == Counter({(1, 10, "a", None): 1})


def test_equality_deletes_through_the_java_api(catalog) -> None:
    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint, p int, v string) USING iceberg PARTITIONED BY (p) " + MOR_V2)
    catalog.sql(
        "INSERT INTO {cat}.ns.t VALUES (1, 0, 'a'), (2, 1, 'b'), (3, 0, 'c'), (3, 1, 'c'), (3000000000, 1, 'x')"
    )
    files = catalog.write_equality_deletes("t", "SELECT 3 AS id UNION ALL SELECT 3000000000 AS id")
    assert len(files) == 2  # one per live partition
    assert all(str(f.content()) == "EQUALITY_DELETES" for f in files)
    snap = catalog.load_table("t").current_snapshot()
    assert snap.summary.operation.value == "delete"
    assert snap.summary["added-equality-deletes"] == "4"
    rows = catalog.snapshot_rows("t", snap.snapshot_id)
    assert sorted(oracle.row_tuples(rows.table)) == [(1, 0, "a"), (2, 1, "b")]


def test_equality_delete_does_not_apply_to_data_of_the_same_commit(catalog) -> None:
    catalog.sql("CREATE TABLE {cat}.ns.t (id bigint, v string) USING iceberg " + MOR_V2)
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1, 'old'), (2, 'old')")
    data = catalog.write_data_file("t", "SELECT 1 AS id, 'new' AS v")
    deletes = catalog.write_equality_deletes("t", "SELECT 1 AS id", commit=False)
    delta = catalog.java_table("t").newRowDelta().addRows(data)
    for d in deletes:
        delta = delta.addDeletes(d)
    delta.commit()
    rows = catalog.snapshot_rows("t", catalog.current_snapshot_id("t"))
    assert sorted(oracle.row_tuples(rows.table)) == [(1, "new"), (2, "old")]


# -- workloads and the oracle itself -------------------------------------------------------------


@pytest.mark.parametrize(
    ("format_version", "partitioned", "mode", "seed"),
    [(2, False, MOR, 11), (3, True, COW, 12)],
    ids=["v2-unpartitioned-mor", "v3-partitioned-cow"],
)
def test_workload_and_oracle_are_consistent(catalog, format_version, partitioned, mode, seed) -> None:
    w = Workload(catalog, "t", seed=seed, steps=8, format_version=format_version, partitioned=partitioned, mode=mode)
    created = w.run()
    assert len(created) == 8, w.describe()
    assert catalog.snapshot_ids("t")[-len(created):] == created
    table = catalog.load_table("t")
    assert table.metadata.format_version == format_version

    for snap in oracle.range_snapshots(table, None, None):
        deletes, inserts = oracle.expected_changes(catalog, "t", snap.parent_id, snap.snapshot_id, table.schema())
        if snap.operation == "replace":
            assert not deletes and not inserts, f"Java changed rows in a replace snapshot\n{w.describe()}"
        if snap.operation == "append":
            assert not deletes, w.describe()

    # a change table built from the oracle passes the checker; a corrupted one does not
    reference = oracle.oracle_changes(catalog, "t")
    assert reference.num_rows > 0
    oracle.assert_changes_match(reference, catalog, "t", context=w.describe())
    ids = catalog.snapshot_ids("t")
    mid = ids[len(ids) // 2]
    sub = oracle.oracle_changes(catalog, "t", ids[1], mid)
    oracle.assert_changes_match(sub, catalog, "t", ids[1], mid)
    broken = reference.slice(1)
    problems = oracle.check_changes(broken, catalog, "t")
    assert problems and "missing" in "\n".join(problems)
    doubled = pa.concat_tables([reference, reference.slice(0, 1)])
    assert any("extra" in p for p in oracle.check_changes(doubled, catalog, "t"))


def test_java_changelog_view_on_copy_on_write(catalog) -> None:
    catalog.sql(
        "CREATE TABLE {cat}.ns.t (id bigint, v string) USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='copy-on-write', 'write.update.mode'='copy-on-write', 'write.merge.mode'='copy-on-write')"
    )
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'bb' WHERE id = 2")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 3")
    ids = catalog.snapshot_ids("t")
    changes = catalog.java_changelog("t", identifier_columns=["id"])
    cols = ("id", "v", "_change_type", "_change_ordinal", "_commit_snapshot_id")
    got = sorted(zip(*(changes.column(c).to_pylist() for c in cols), strict=True))
    assert got == sorted([
        (1, "a", "INSERT", 0, ids[0]),
        (2, "b", "INSERT", 0, ids[0]),
        (3, "c", "INSERT", 0, ids[0]),
        (2, "b", "UPDATE_BEFORE", 1, ids[1]),
        (2, "bb", "UPDATE_AFTER", 1, ids[1]),
        (3, "c", "DELETE", 2, ids[2]),
    ])
    sub = catalog.java_changelog("t", ids[0], ids[1], identifier_columns=["id"])
    assert sub.num_rows == 2
