"""Update pairing by v3 row lineage, against Java's own `_row_id` reads of parent and child snapshot.

Java Iceberg 1.10 on Spark 3.5 writes the tables (merge-on-read and copy-on-write UPDATE, a MERGE
that updates, inserts and deletes in one statement, `rewrite_data_files`, DELETE). For every
snapshot S with parent P, Java's `SELECT _row_id, _last_updated_sequence_number, * ... VERSION AS OF`
of P and S gives the expected changes: a row id in both with other data is an UPDATE pair, a row
id only at P a DELETE, only at S an INSERT; equal data is no change. No identifier columns are
given anywhere. `--with-row-lineage`'s values must equal Java's too.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetail.kernel.errors import ConfigError
from tests.support.lineage_workload import (
    DATA,
    LINEAGE,
    STATEMENTS,
    check_pairs_adjacent,
    check_snapshots,
    create_table,
    java_rows,
    tuples,
)
from tests.support.oracle import assert_changes_match
from tests.support.workloads import COW, MOR, table_properties


def _check_every_snapshot(catalog: Any, changes: pa.Table, in_range: list[int] | None = None) -> list[str]:
    """Every snapshot of `in_range` (default: the whole history) against Java's live reads."""
    snapshots = [
        (s.snapshot_id, s.parent_snapshot_id)
        for s in catalog.snapshots("t")
        if in_range is None or s.snapshot_id in in_range
    ]
    return check_snapshots(changes, snapshots, lambda snapshot_id: java_rows(catalog, snapshot_id))


def _java_rows_by_id(catalog: Any, snapshot_id: int) -> dict[Any, Any]:
    """The `_row_id` of each row at a snapshot, by the row's `id` column."""
    return {rows[0][2]: row_id for row_id, rows in java_rows(catalog, snapshot_id).items()}


def _ancestors_through(catalog: Any, snapshot_id: int) -> list[int]:
    ids = catalog.snapshot_ids("t")
    return ids[: ids.index(snapshot_id) + 1]


@pytest.mark.parametrize("mode", [MOR, COW])
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_updates_pair_by_row_id_as_java_reads_them(catalog, mode, partitioned) -> None:
    from icetail.monitor.engine.api import read_changes

    create_table(catalog, mode, partitioned=partitioned)
    for statement in STATEMENTS:
        catalog.sql(statement)
    table = catalog.load_table("t")

    with_lineage = read_changes(table, with_row_lineage=True)
    assert with_lineage.column_names[: len(DATA) + 2] == [*DATA, *LINEAGE]
    problems = _check_every_snapshot(catalog, with_lineage)
    assert not problems, "\n".join(problems)
    assert {"UPDATE_BEFORE", "UPDATE_AFTER", "DELETE", "INSERT"} <= set(with_lineage.column("_change_type").to_pylist())

    # the default output pairs the same way, without the lineage columns; the data invariant holds
    plain = read_changes(table)
    assert plain.column_names == [c for c in with_lineage.column_names if c not in LINEAGE]
    assert plain.equals(with_lineage.drop_columns(list(LINEAGE)))
    assert_changes_match(plain, catalog, "t")

    # sub-ranges pair the same way, snapshot by snapshot
    ids = catalog.snapshot_ids("t")
    middle = read_changes(table, ids[2], ids[-2], with_row_lineage=True)
    problems = _check_every_snapshot(catalog, middle, ids[3:-1])
    assert not problems, "\n".join(problems)


def test_tables_without_lineage_fall_back_to_identifier_columns(catalog) -> None:
    """v2 has no row lineage; a v2 table upgraded to v3 has none for the snapshots before the upgrade."""
    from icetail.monitor.engine.api import read_changes

    create_table(catalog, MOR, format_version=2)
    for statement in STATEMENTS[:4]:
        catalog.sql(statement)
    v2 = catalog.load_table("t")
    with pytest.raises(ConfigError, match="needs a format-version 3 table.*format-version 2"):
        read_changes(v2, with_row_lineage=True)
    kinds = Counter(read_changes(v2).column("_change_type").to_pylist())
    assert kinds["UPDATE_BEFORE"] == 0 and kinds["DELETE"] > 0
    by_key = read_changes(v2, identifier_columns=["id"])
    assert Counter(by_key.column("_change_type").to_pylist())["UPDATE_BEFORE"] == 4  # 2, 3, 8, then 5
    assert_changes_match(by_key, catalog, "t", identifier_columns=["id"])

    upgraded_at = catalog.current_snapshot_id("t")
    catalog.sql("ALTER TABLE {cat}.ns.t SET TBLPROPERTIES ('format-version'='3')")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'after-upgrade' WHERE id IN (3, 6)")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (30L, 0, 'n', 1.0D)")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'again' WHERE id IN (3, 30)")
    v3 = catalog.load_table("t")
    changes = read_changes(v3, with_row_lineage=True)
    old = changes.filter(pa.compute.less_equal(changes.column("_change_ordinal"), 3))
    # before the upgrade: no row ids, so no pairs without identifier columns
    assert old.column("_row_id").null_count == old.num_rows
    assert old.column("_last_updated_sequence_number").null_count == old.num_rows
    assert "UPDATE_BEFORE" not in old.column("_change_type").to_pylist()
    new = changes.filter(pa.compute.greater(changes.column("_change_ordinal"), 3))
    problems = check_pairs_adjacent(new)
    upgrade_commit, *later = [s for s in catalog.snapshot_ids("t") if s not in _ancestors_through(catalog, upgraded_at)]
    # the first v3 commit assigns row ids to the files written before, and Java's UPDATE gives the
    # rows it rewrites new ones: their old images have no row id (Java reads the parent without)
    first = new.filter(pa.compute.equal(new.column("_commit_snapshot_id"), upgrade_commit))
    assert sorted(tuples(first, ("_change_type", "id", "v", "_row_id"))) == [
        ("DELETE", 3, "v3u", None),
        ("DELETE", 6, "v6", None),
        ("INSERT", 3, "after-upgrade", _java_rows_by_id(catalog, upgrade_commit)[3]),
        ("INSERT", 6, "after-upgrade", _java_rows_by_id(catalog, upgrade_commit)[6]),
    ]
    paired = read_changes(v3, upgraded_at, upgrade_commit, identifier_columns=["id"])
    assert paired.column("_change_type").to_pylist() == ["UPDATE_BEFORE", "UPDATE_AFTER"] * 2
    problems += _check_every_snapshot(catalog, new, later)
    assert not problems, "\n".join(problems)
    assert_changes_match(read_changes(v3), catalog, "t")


def _pipeline_config(catalog: Any, root: Path, consumer: str, **options: Any) -> Any:
    from icetail.monitor.engine.config import PipelineConfig

    return PipelineConfig(
        catalog.name, "ns.t", f"sqlite:///{root}/state.db", f"parquet://{root}/{consumer}", consumer=consumer, **options
    )


def _ordered_rows(rows: pa.Table) -> list[tuple[Any, ...]]:
    columns = tuple(c for c in rows.column_names if c != "_commit_timestamp")
    return sorted(tuples(rows, columns), key=repr)


@pytest.mark.parametrize("staged", [True, False], ids=["staging-sink", "driver-sink"])
def test_run_delivers_lineage_pairs_and_values(catalog, spark, tmp_path, monkeypatch, staged) -> None:
    """`icetail run`'s pipeline pairs by lineage by default and delivers the lineage columns on request."""
    from icetail.monitor.engine.api import read_changes
    from icetail.monitor.engine.pipeline import Pipeline
    from icetail.sinks.files.parquet import ParquetDirSink
    from tests.support.sinks import CrashingSink

    catalog.set_env(monkeypatch)
    create_table(catalog, MOR)
    for statement in STATEMENTS[:5]:
        catalog.sql(statement)
    table = catalog.load_table("t")
    for consumer, with_lineage in (("plain", False), ("lineage", True)):
        config = _pipeline_config(
            catalog, tmp_path, consumer, with_row_lineage=with_lineage, max_snapshots_per_batch=2
        )
        # a wrapped sink (that never crashes) is not a staging sink: the driver writes every chunk
        parquet = ParquetDirSink(tmp_path / consumer, consumer=consumer)
        sink = None if staged else CrashingSink(parquet, 0, after_write=True)
        with Pipeline(config, spark=spark, sink=sink) as pipeline:
            assert all(o.completed for o in pipeline.run())
        delivered = pq.read_table(tmp_path / consumer)
        expected = read_changes(table, with_row_lineage=with_lineage, spark=spark)
        assert delivered.column_names == expected.column_names
        assert _ordered_rows(delivered) == _ordered_rows(expected)
    assert "UPDATE_AFTER" in delivered.column("_change_type").to_pylist()


def test_with_row_lineage_is_refused_on_a_v2_table_by_run_and_changes(catalog, tmp_path, monkeypatch, capsys) -> None:
    from icetail.monitor.cli.main import main
    from icetail.monitor.engine.pipeline import Pipeline

    catalog.set_env(monkeypatch)
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, MOR).items())
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1L, 'a')")
    with pytest.raises(ConfigError, match="--with-row-lineage needs a format-version 3 table"):
        with Pipeline(_pipeline_config(catalog, tmp_path, "c", with_row_lineage=True)) as pipeline:
            pipeline.run()
    code = main(["changes", "--catalog", catalog.name, "--table", "ns.t", "--with-row-lineage", "--output", "-"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "format-version 3" in err[0] and "format-version 2" in err[0]


def test_a_batch_written_ahead_by_the_previous_release_resumes_without_lineage(
    catalog, spark, tmp_path, monkeypatch
) -> None:
    """Split format 3 has no first_row_id: its batch resumes as the previous release delivers it (no
    lineage pairs), and the next batch, planned by this release, pairs by lineage."""
    from icetail.monitor.engine.pipeline import Pipeline
    from icetail.sinks.files.parquet import ParquetDirSink
    from icetail.state.codec import VERSION_KEY
    from tests.support.sinks import CrashingSink, SimulatedCrash

    catalog.set_env(monkeypatch)
    create_table(catalog, MOR)
    catalog.sql(STATEMENTS[0])
    catalog.sql(STATEMENTS[1])  # S2: updates 2, 3, 8
    config = _pipeline_config(catalog, tmp_path, "up", max_snapshots_per_batch=1)
    with Pipeline(config, spark=spark) as first:
        first.run(once=True)  # S1 delivered
    crashing = CrashingSink(ParquetDirSink(tmp_path / "up", consumer="up"), 1, after_write=False)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as second:
        second.run()  # S2's batch is written ahead; its one (reconciled) write crashes
    db = sqlite3.connect(tmp_path / "state.db")
    with db:
        texts = db.execute("SELECT consumer, batch_id, split_id, split_json FROM icetail_inflight_splits").fetchall()
        assert texts
        for consumer, batch_id, split_id, text in texts:
            raw = json.loads(text)
            assert raw[VERSION_KEY] == 4 and raw["task"]["data_file"]["first_row_id"] is not None
            raw[VERSION_KEY] = 3  # what the release before row lineage wrote
            del raw["task"]["data_file"]["first_row_id"]
            db.execute(
                "UPDATE icetail_inflight_splits SET split_json = ? "
                "WHERE consumer = ? AND batch_id = ? AND split_id = ?",
                (json.dumps(raw, sort_keys=True, separators=(",", ":")), consumer, batch_id, split_id),
            )
    db.close()
    catalog.sql("UPDATE {cat}.ns.t SET v = 'later' WHERE id = 5")  # S3, planned by this release
    with Pipeline(config, spark=spark) as third:
        outcomes = third.run()
    assert [(o.resumed, o.completed) for o in outcomes] == [(True, True), (False, True)]
    delivered = pq.read_table(tmp_path / "up")
    kinds = Counter(tuples(delivered, ("_change_ordinal", "_change_type")))
    assert kinds == Counter({(0, "INSERT"): 10, (1, "DELETE"): 3, (1, "INSERT"): 3, (2, "UPDATE_BEFORE"): 1,
                             (2, "UPDATE_AFTER"): 1})  # fmt: skip
    assert_changes_match(delivered, catalog, "t")
