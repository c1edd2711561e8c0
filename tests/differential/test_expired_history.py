"""Expired history under a consumer, on Java-written tables, checked against Java's reads.

A consumer delivers part of a seeded workload's history and stops; more snapshots follow;
Java expires snapshots (the `expire_snapshots` procedure, or the Java API with and without
`cleanExpiredFiles`); more snapshots follow. Then:

* an unprotected consumer stops with CursorExpiredError and an unchanged state;
* a `--protect-cursor` consumer (its tag kept the cursor snapshot, expiry took the chain) is
  repaired by a direct diff: one collapsed batch whose rows, as multisets, are exactly
  Java's rows at the cursor snapshot minus Java's rows now (DELETEs) and the reverse
  (INSERTs), carrying the current snapshot's id and time; the whole sink replays to the table.

A rollback is delivered the same way with `--on-missing-cursor diff`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from icetail.monitor.cli.main import main
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.engine.startup import (
    CursorChainExpiredError,
    CursorExpiredError,
    CursorNotDescendantError,
    cursor_problem,
)
from icetail.monitor.planning.lineage import CursorCondition
from tests.support.expiry import expire
from tests.support.oracle import DELETE_TYPES, INSERT_TYPES, canonical_rows, rows_at
from tests.support.sinks import read_parquet_sink
from tests.support.workloads import COW, MIXED, MOR, Workload

CONFIGS = [
    pytest.param(2, False, MOR, 11, id="v2-unpartitioned-mor"),
    pytest.param(2, True, MIXED, 12, id="v2-partitioned-mixed"),
    pytest.param(2, False, COW, 13, id="v2-unpartitioned-cow"),
]
EXPIRY = ["procedure-retain-last", "procedure-by-age", "api-keep-files"]


def advance(w: Workload, snapshots: int) -> None:
    """`snapshots` more snapshots of the workload's random mix (Workload.run's loop, resumable)."""
    target = len(w.snapshot_ids) + snapshots
    attempts = 0
    while len(w.snapshot_ids) < target and attempts < snapshots * 4:
        attempts += 1
        w.maybe_evolve()
        if w.mode == MIXED and w.rng.random() < 0.5:
            w.set_mode(w.rng.choice((MOR, COW)))
        getattr(w, w.choose())()


def pipeline_config(catalog: Any, ident: str, root: Path, consumer: str, **options: Any) -> PipelineConfig:
    return PipelineConfig(
        catalog.name, ident, f"sqlite:///{root}/state.db", f"parquet://{root}/{consumer}", consumer=consumer, **options
    )


def split_rows(rows: pa.Table, schema: Any) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """(DELETE + UPDATE_BEFORE, INSERT + UPDATE_AFTER) rows of `rows`, as multisets over `schema`."""
    names = [f.name for f in schema.fields]
    types = rows.column("_change_type").to_pylist()
    tuples = canonical_rows(rows.select(names), schema, schema)
    deletes = Counter(t for t, k in zip(tuples, types, strict=True) if k in DELETE_TYPES)
    inserts = Counter(t for t, k in zip(tuples, types, strict=True) if k in INSERT_TYPES)
    return deletes, inserts


def check_repair(catalog: Any, ident: str, sink_dir: Path, cursor_id: int, batch_id: str, spark: Any) -> None:
    """The repair batch is Java's (rows at cursor) vs (rows now); the whole sink replays to now."""
    table = catalog.load_table(ident)
    current = table.current_snapshot()
    schema = table.schema()
    everything = read_parquet_sink(sink_dir)
    assert everything is not None
    ids = everything.column("_commit_snapshot_id")
    repair = everything.filter(pc.equal(ids, current.snapshot_id))
    earlier = everything.filter(pc.not_equal(ids, current.snapshot_id))
    assert batch_id.endswith("-d1"), batch_id
    # the sink sees the marker too: the batch id is part of every chunk's name (file name, Iceberg chunk-id)
    files = sorted(p.name for p in sink_dir.glob("*.parquet"))
    assert any(batch_id in f for f in files) and all(("-d1-" in f) == (batch_id in f) for f in files), files
    before = rows_at(catalog, ident, cursor_id, schema)
    after = rows_at(catalog, ident, current.snapshot_id, schema)
    deletes, inserts = split_rows(repair, schema)
    gone, new = before - after, after - before
    assert deletes == gone, f"DELETEs differ: extra {deletes - gone}, missing {gone - deletes}"
    assert inserts == new, f"INSERTs differ: extra {inserts - new}, missing {new - inserts}"
    stamps = pc.cast(pc.cast(repair.column("_commit_timestamp"), pa.timestamp("ms", tz="UTC")), pa.int64())
    assert set(stamps.to_pylist()) <= {current.timestamp_ms}
    if table.snapshot_by_id(cursor_id).schema_id != current.schema_id:
        return  # earlier batches were written under older column names: the replay below compares by name
    # the sink as a whole: replaying every batch takes the empty table to the rows now
    state: Counter[tuple[Any, ...]] = Counter()
    for ordinal in sorted(set(earlier.column("_change_ordinal").to_pylist())):
        part = earlier.filter(pc.equal(earlier.column("_change_ordinal"), ordinal))
        d, i = split_rows(part, schema)
        assert not d - state
        state = state - d + i
    assert state == before, "the batches before the repair do not add up to the rows at the cursor"
    assert (state - deletes) + inserts == after


@pytest.mark.parametrize("how", EXPIRY)
@pytest.mark.parametrize(("format_version", "partitioned", "mode", "seed"), CONFIGS)
def test_protected_consumer_is_repaired_by_a_direct_diff(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, format_version: int, partitioned: bool, mode: str,
    seed: int, how: str,
) -> None:  # fmt: skip
    catalog.set_env(monkeypatch)
    w = Workload(catalog, "t", seed=seed * 10 + EXPIRY.index(how), format_version=format_version,
                 partitioned=partitioned, mode=mode)  # fmt: skip
    w.create()
    w.insert(rows=20)
    advance(w, w.rng.randrange(1, 4))
    protected = pipeline_config(catalog, w.ident, tmp_path, "protected", protect_cursor=True)
    bare = pipeline_config(catalog, w.ident, tmp_path, "bare")
    # at different snapshots: the protected consumer's tag would keep the other's cursor too
    with Pipeline(bare, spark=spark) as pipeline:
        pipeline.run()
    advance(w, 1)
    with Pipeline(protected, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(w.ident)
    advance(w, 3)
    expire(catalog, w.ident, how)
    advance(w, 2)
    metadata = catalog.load_table(w.ident).metadata
    assert metadata.refs["icetail-protected"].snapshot_id == cursor_id
    with Pipeline(bare, spark=spark) as pipeline:
        problem = cursor_problem(metadata, pipeline.checkpoint().cursor)  # type: ignore[union-attr]
        assert problem is not None and problem.condition == CursorCondition.CURSOR_EXPIRED
        generation = pipeline.checkpoint().generation  # type: ignore[union-attr]
        with pytest.raises(CursorExpiredError, match="has expired.*--protect-cursor"):
            pipeline.run()
        assert pipeline.checkpoint().generation == generation  # type: ignore[union-attr]
    with Pipeline(protected, spark=spark) as pipeline:
        problem = cursor_problem(metadata, pipeline.checkpoint().cursor)  # type: ignore[union-attr]
        assert problem is not None and problem.condition == CursorCondition.CHAIN_EXPIRED, w.describe()
        outcomes = pipeline.run()
        assert outcomes and outcomes[0].collapsed and len(outcomes) == 1, outcomes
        checkpoint = pipeline.checkpoint()
        assert checkpoint is not None and checkpoint.cursor.snapshot_id == metadata.current_snapshot_id
    check_repair(catalog, w.ident, tmp_path / "protected", cursor_id, outcomes[0].batch_id, spark)
    # and it carries on snapshot by snapshot
    advance(w, 1)
    with Pipeline(protected, spark=spark) as pipeline:
        more = pipeline.run()
    assert more and not any(o.collapsed for o in more)


def status_json(tmp_path: Path, consumer: str, capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["status", "--state", f"sqlite:///{tmp_path}/state.db", "--consumer", consumer, "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert len(reports) == 1
    return reports[0]  # type: ignore[no-any-return]


def test_unprotected_chain_break_names_its_fix(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Cursor kept by hand (a tag the user made), chain expired: the message says diff, and diff repairs it;
    `status` names the condition, then the collapsed batch."""
    catalog.set_env(monkeypatch)
    w = Workload(catalog, "t", seed=5, mode=MOR)
    w.create()
    w.insert(rows=20)
    advance(w, 2)
    config = pipeline_config(catalog, w.ident, tmp_path, "c")
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(w.ident)
    catalog.sql(f"ALTER TABLE {w.fq} CREATE TAG keep AS OF VERSION {cursor_id}")
    advance(w, 3)
    expire(catalog, w.ident, "procedure-retain-last")
    with Pipeline(config, spark=spark) as pipeline, pytest.raises(
        CursorChainExpiredError, match="between it and current snapshot .* have expired.*--on-missing-cursor diff"
    ):
        pipeline.run()
    report = status_json(tmp_path, "c", capsys)
    assert report["cursor_condition"] == "chain_expired" and "--on-missing-cursor diff" in report["lag_error"]
    assert report["last_batch"]["collapsed"] is False
    with Pipeline(pipeline_config(catalog, w.ident, tmp_path, "c", on_missing_cursor="diff"), spark=spark) as p:
        outcomes = p.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed
    report = status_json(tmp_path, "c", capsys)
    assert report["cursor_condition"] == "ok" and report["lag_snapshots"] == 0
    assert report["last_batch"]["collapsed"] is True
    assert report["last_batch"]["batch_id"] == outcomes[0].batch_id
    assert main(["status", "--state", f"sqlite:///{tmp_path}/state.db", "--consumer", "c"]) == 0
    assert "collapsed history" in capsys.readouterr().out
    check_repair(catalog, w.ident, tmp_path / "c", cursor_id, outcomes[0].batch_id, spark)


def test_rollback_is_told_apart_and_delivered_by_diff(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    catalog.set_env(monkeypatch)
    w = Workload(catalog, "t", seed=7, partitioned=True, mode=MIXED)
    w.create()
    w.insert(rows=20)
    advance(w, 2)
    target = catalog.current_snapshot_id(w.ident)
    advance(w, 3)
    config = pipeline_config(catalog, w.ident, tmp_path, "r", protect_cursor=True)
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(w.ident)
    catalog.sql(f"CALL {{cat}}.system.rollback_to_snapshot('{w.ident}', {target})")
    advance(w, 2)
    with Pipeline(config, spark=spark) as pipeline, pytest.raises(
        CursorNotDescendantError, match="does not descend from cursor .*rollback.*--on-missing-cursor diff"
    ):
        pipeline.run()  # protection repairs expiry by default, never a rollback
    with Pipeline(pipeline_config(catalog, w.ident, tmp_path, "r", on_missing_cursor="diff"), spark=spark) as p:
        outcomes = p.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed
    check_repair(catalog, w.ident, tmp_path / "r", cursor_id, outcomes[0].batch_id, spark)


@pytest.mark.parametrize("format_version", [2, 3])
def test_direct_diff_reads_only_the_files_that_differ(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, format_version: int
) -> None:
    """Untouched files are skipped unread; a file with new deletes is read through before/after masks."""
    catalog.set_env(monkeypatch)
    ident = catalog.ident("t")
    fq = catalog.fq(ident)
    props = f"'format-version'='{format_version}', 'write.delete.mode'='merge-on-read', " \
        "'write.update.mode'='merge-on-read'"
    catalog.sql(f"CREATE TABLE {fq} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    for first in (0, 10, 20, 30):  # four data files
        rows = f"SELECT /*+ COALESCE(1) */ id, CAST(id AS STRING) FROM range({first}, {first + 10})"
        catalog.sql(f"INSERT INTO {fq} {rows}")
    config = pipeline_config(catalog, ident, tmp_path, "d", on_missing_cursor="diff")
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(ident)
    catalog.sql(f"ALTER TABLE {fq} CREATE TAG keep AS OF VERSION {cursor_id}")
    catalog.sql(f"DELETE FROM {fq} WHERE id IN (1, 2)")  # file 0: position deletes / a DV
    catalog.sql(f"UPDATE {fq} SET v = 'u' WHERE id = 13")  # file 1: a delete and a new file
    catalog.sql(f"DELETE FROM {fq} WHERE id = 14")  # file 1 again
    # a duplicate of the updated row, and a new one
    catalog.sql(f"INSERT INTO {fq} SELECT /*+ COALESCE(1) */ * FROM VALUES (13L, 'u'), (99L, 'new')")
    expire(catalog, ident, "procedure-retain-last")
    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed
    # files 2 and 3 are untouched: only file 0, file 1 and the two new files are read
    assert outcomes[0].data_files == 4, outcomes[0]
    check_repair(catalog, ident, tmp_path / "d", cursor_id, outcomes[0].batch_id, spark)
    rows = read_parquet_sink(tmp_path / "d")
    assert rows is not None
    repair = rows.filter(pc.equal(rows.column("_commit_snapshot_id"), catalog.current_snapshot_id(ident)))
    changed = sorted(zip(repair.column("_change_type").to_pylist(), repair.column("id").to_pylist(), strict=True))
    if format_version < 3:
        assert changed == [
            ("DELETE", 1), ("DELETE", 2), ("DELETE", 13), ("DELETE", 14), ("INSERT", 13), ("INSERT", 13), ("INSERT", 99)
        ]  # fmt: skip
    else:  # row lineage: the updated row 13 keeps its _row_id, the duplicate is a new row
        assert changed == [
            ("DELETE", 1), ("DELETE", 2), ("DELETE", 14), ("INSERT", 13), ("INSERT", 99),
            ("UPDATE_AFTER", 13), ("UPDATE_BEFORE", 13)
        ]  # fmt: skip


@pytest.mark.parametrize("partition_bytes", [0, 64], ids=["whole", "partitioned"])
def test_direct_diff_with_identifier_columns_pairs_updates_and_cancels_compaction(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, partition_bytes: int
) -> None:
    """A compaction between the two snapshots cancels as carry-over; one change per key pairs as an update.

    `partitioned`: the collapsed commit is reconciled by Spark tasks in partitions (reader/changes/shuffle.py),
    as any snapshot bigger than --reconcile-partition-bytes is, and delivers the same rows."""
    catalog.set_env(monkeypatch)
    ident = catalog.ident("t")
    fq = catalog.fq(ident)
    props = "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    catalog.sql(f"CREATE TABLE {fq} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    for first in (0, 10):
        catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range({first}, {first + 10})")
    config = pipeline_config(
        catalog, ident, tmp_path, "k", on_missing_cursor="diff", identifier_columns=("id",),
        reconcile_partition_bytes=partition_bytes,
    )  # fmt: skip
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(ident)
    catalog.sql(f"ALTER TABLE {fq} CREATE TAG keep AS OF VERSION {cursor_id}")
    catalog.sql(f"UPDATE {fq} SET v = 'x' WHERE id = 3")
    catalog.sql(f"DELETE FROM {fq} WHERE id = 15")
    catalog.sql(f"CALL {{cat}}.system.rewrite_data_files(table => '{ident}', options => map('min-input-files', '1'))")
    catalog.sql(f"UPDATE {fq} SET v = 'y' WHERE id = 4")
    expire(catalog, ident, "api-keep-files")
    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed
    # whole: one chunk; in partitions: a chunk per partition that holds a change (the rest are empty)
    assert (outcomes[0].chunks > 1) == (partition_bytes > 0), outcomes[0]
    check_repair(catalog, ident, tmp_path / "k", cursor_id, outcomes[0].batch_id, spark)
    rows = read_parquet_sink(tmp_path / "k")
    assert rows is not None
    repair = rows.filter(pc.equal(rows.column("_commit_snapshot_id"), catalog.current_snapshot_id(ident)))
    got = sorted(zip(repair.column("_change_type").to_pylist(), repair.column("id").to_pylist(),
                     repair.column("v").to_pylist(), strict=True))  # fmt: skip
    assert got == [
        ("DELETE", 15, "15"), ("UPDATE_AFTER", 3, "x"), ("UPDATE_AFTER", 4, "y"),
        ("UPDATE_BEFORE", 3, "3"), ("UPDATE_BEFORE", 4, "4"),
    ]  # fmt: skip


def test_what_refs_keep_under_java_expiry(catalog: Any, monkeypatch: Any) -> None:
    """Measured, not assumed (docs/delivery.md): a tag or a per-consumer branch at the cursor keeps the
    cursor snapshot but not the snapshots after it; only main's own retention keeps main's chain."""
    catalog.set_env(monkeypatch)
    ident = catalog.ident("t")
    fq = catalog.fq(ident)
    catalog.sql(f"CREATE TABLE {fq} (id bigint) USING iceberg TBLPROPERTIES ('format-version'='2')")
    for i in range(3):
        catalog.sql(f"INSERT INTO {fq} VALUES ({i})")
    cursor_id = catalog.current_snapshot_id(ident)
    catalog.sql(f"ALTER TABLE {fq} CREATE TAG icetail_tag AS OF VERSION {cursor_id}")
    catalog.sql(
        f"ALTER TABLE {fq} CREATE BRANCH icetail_branch AS OF VERSION {cursor_id} "
        "RETAIN 7 DAYS WITH SNAPSHOT RETENTION 100 SNAPSHOTS"
    )
    for i in range(3, 6):
        catalog.sql(f"INSERT INTO {fq} VALUES ({i})")
    chain = catalog.snapshot_ids(ident)
    after_cursor = chain[chain.index(cursor_id) + 1 : -1]
    assert len(after_cursor) == 2
    expire(catalog, ident, "procedure-retain-last")
    kept = {s.snapshot_id for s in catalog.load_table(ident).metadata.snapshots}
    assert cursor_id in kept  # the tag (and the branch) keep the cursor snapshot ...
    assert set(chain[: chain.index(cursor_id)]) <= kept  # ... the branch its own ancestors ...
    assert not set(after_cursor) & kept  # ... but nothing after the cursor: the chain to main is gone

    # main's own retention (a table-wide ref property, not per consumer) does keep main's chain
    for i in range(6, 9):
        catalog.sql(f"INSERT INTO {fq} VALUES ({i})")
    catalog.java_table(ident).manageSnapshots().setMinSnapshotsToKeep("main", 100).commit()
    chain = catalog.snapshot_ids(ident)
    expire(catalog, ident, "procedure-retain-last")
    kept = {s.snapshot_id for s in catalog.load_table(ident).metadata.snapshots}
    assert set(chain) <= kept
