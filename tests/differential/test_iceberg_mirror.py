"""The Iceberg mirror on Java-written tables: after every run the target, read by Java's reader,
equals what Java's reader returns for the source at the checkpointed snapshot. Merge-on-read
(partitioned) and copy-on-write UPDATE, DELETE and MERGE, an UPDATE that changes the key, a key
deleted and re-inserted within one batch, a partition move, a no-op update, compaction, INSERT
OVERWRITE, equality deletes (tests/support/mirror_workload.py, shared with the PostgreSQL mirror);
and the history (mode=history) on the same workload: for every snapshot, the versions valid at it
are what Java's reader returns for the source at it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.iceberg.mirror import tasks as iceberg_mirror_tasks
from icetail.state.store import open_store
from tests.support import mirror_workload
from tests.support.mirror_checks import history_problems
from tests.support.mirror_workload import (
    ROW_ID_STEPS,
    create_keyed_table,
    create_keyless_v3_table,
    equality_delete_step,
    keyed_steps,
)
from tests.support.pg_mirror import row_set
from tests.support.workloads import COW, MOR

TARGET = "ns.m"


@pytest.fixture(autouse=True, params=["driver", "tasks"])
def place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the target's files rewritten in the driver, and in Spark tasks (threshold 0)."""
    monkeypatch.setattr(iceberg_mirror_tasks, "DEFAULT_TASK_BYTES", 0 if request.param == "tasks" else -1)
    return str(request.param)


def _config(catalog: Any, tmp_path: Path, mode: str = "mirror") -> PipelineConfig:
    return PipelineConfig(
        catalog=catalog.name,
        table="ns.t",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        sink_url=f"iceberg://{catalog.name}/{TARGET}?mode={mode}",
        consumer="mirror",
        chunk_rows=3,
    )


def _run_and_check(catalog: Any, config: PipelineConfig, spark: Any) -> None:
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    with open_store(config.state_url) as store:
        checkpoint = store.load(config.consumer_id)
    assert checkpoint is not None and checkpoint.inflight is None and checkpoint.cursor.snapshot_id is not None
    cursor = checkpoint.cursor.snapshot_id
    assert cursor == catalog.current_snapshot_id("t")
    java = catalog.snapshot_rows("t", cursor).table
    mirrored = catalog.snapshot_rows(TARGET, catalog.current_snapshot_id(TARGET)).table  # read by Java
    columns = tuple(java.column_names)
    target, expected = row_set(mirrored, columns), row_set(java, columns)
    assert target == expected, f"at {cursor}: target-only {set(target) - set(expected)}, java-only " + (
        f"{set(expected) - set(target)}"
    )


@pytest.mark.parametrize(("mode", "partitioned"), [(MOR, True), (COW, False)], ids=["mor-partitioned", "cow"])
def test_iceberg_mirror_equals_java_after_every_run(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, partitioned: bool
) -> None:
    catalog.set_env(monkeypatch)
    create_keyed_table(catalog, mode, partitioned)
    config = _config(catalog, tmp_path)
    for statements in keyed_steps(partitioned):
        for statement in statements:
            catalog.sql(statement)
        _run_and_check(catalog, config, spark)
    if mode == MOR:
        equality_delete_step(catalog)
        _run_and_check(catalog, config, spark)


def test_v3_table_without_a_key_is_mirrored_by_row_id(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.set_env(monkeypatch)
    create_keyless_v3_table(catalog)
    config = _config(catalog, tmp_path)
    for statements in ROW_ID_STEPS:
        for statement in statements:
            catalog.sql(statement)
        with Pipeline(config, spark=spark) as pipeline:
            pipeline.run()
        with open_store(config.state_url) as store:
            checkpoint = store.load(config.consumer_id)
        assert checkpoint is not None and checkpoint.cursor.snapshot_id is not None
        java = catalog.snapshot_rows("t", checkpoint.cursor.snapshot_id).table
        target = catalog.load_table(TARGET).scan().to_arrow()
        assert Counter(row_set(target, ("id", "v"))) == Counter(row_set(java, ("id", "v")))
        assert len(set(target.column("_row_id").to_pylist())) == target.num_rows
    schema = catalog.load_table(TARGET).schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["_row_id"]


def test_iceberg_mirror_follows_schema_evolution_batch_by_batch(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Java evolves the table between writes (ADD, RENAME, ALTER TYPE int -> bigint, DROP); each batch
    ends before a schema change, and after each the target has the source's schema at that snapshot
    (names and types: the target is created from the first batch's schema) and, read by Java, its rows."""
    catalog.set_env(monkeypatch)
    mirror_workload.create_evolving_table(catalog)
    batches = 0
    with Pipeline(_config(catalog, tmp_path), spark=spark) as pipeline:
        while (outcome := pipeline.run_batch()) is not None:
            batches += 1
            java = catalog.snapshot_rows("t", outcome.to_snapshot_inclusive).table
            target = catalog.snapshot_rows(TARGET, catalog.current_snapshot_id(TARGET)).table
            assert target.column_names == java.column_names, outcome
            source = catalog.load_table("ns.t")
            at = source.schemas()[source.snapshot_by_id(outcome.to_snapshot_inclusive).schema_id]
            types = [(f.name, str(f.field_type)) for f in catalog.load_table(TARGET).schema().fields]
            assert types == [(f.name, str(f.field_type)) for f in at.fields], "the target has the source's schema"
            columns = tuple(java.column_names)
            assert row_set(target, columns) == row_set(java, columns), f"after batch to {outcome.to_snapshot_inclusive}"
    assert batches == 5  # one per schema
    schema = catalog.load_table(TARGET).schema()
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [
        ("id", "long"),
        ("n", "long"),
        ("w", "string"),
        ("e", "long"),
    ]


@pytest.mark.parametrize(
    ("mode", "partitioned", "engine"),
    [(MOR, True, "spark"), (COW, False, "spark"), (MOR, True, "local")],
    ids=["mor-partitioned", "cow", "mor-partitioned-in-process"],
)
def test_iceberg_history_holds_what_java_reads_at_every_snapshot(
    catalog: Any,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    partitioned: bool,
    engine: str,
) -> None:
    """mode=history on the mirror workload, run after each step: for every source snapshot S, the
    versions valid at S (read back by Java) are Java's rows of the source at S, stamped with the
    snapshots' commit times; the no-op UPDATE and the compaction make no version. In process too
    (`--engine local`, no session given)."""
    catalog.set_env(monkeypatch)
    create_keyed_table(catalog, mode, partitioned)
    config = replace(_config(catalog, tmp_path, mode="history"), engine=engine)
    session = None if engine == "local" else spark
    columns = ("id", "p", "v", "d")
    counts = []
    steps = keyed_steps(partitioned)
    for statements in steps:
        for statement in statements:
            catalog.sql(statement)
        with Pipeline(config, spark=session) as pipeline:
            pipeline.run()
        counts.append(catalog.load_table(TARGET).scan().count())
    if mode == MOR:
        equality_delete_step(catalog)
        with Pipeline(config, spark=session) as pipeline:
            pipeline.run()
    snapshots = catalog.snapshot_ids("t")
    versions = catalog.snapshot_rows(TARGET, catalog.current_snapshot_id(TARGET)).table  # read by Java
    rows_at = lambda s: catalog.snapshot_rows("t", s).table  # noqa: E731
    problems = history_problems(versions, snapshots, rows_at, columns)
    stamped = catalog.load_table(TARGET).scan().to_arrow()  # the commit times, tz-aware (pyiceberg)
    assert row_set(stamped, columns) == row_set(versions, columns)
    commit_ms = {s.snapshot_id: s.timestamp_ms for s in catalog.snapshots("t")}
    problems += history_problems(stamped, snapshots, rows_at, columns, commit_ms=commit_ms)
    assert not problems, "\n".join(problems)
    twelve = sorted((r for r in stamped.to_pylist() if r["id"] == 12), key=lambda r: r["_valid_from"])
    assert [r["v"] for r in twelve] == ["v12", "v12-ow"], "UPDATE SET v = v made no version (INSERT OVERWRITE one)"
    compaction = next(i for i, s in enumerate(steps) if "rewrite_data_files" in s[0])
    assert counts[compaction] == counts[compaction - 1], "the compaction made no version"
    schema = catalog.load_table(TARGET).schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id", "_valid_from_snapshot_id"]
