"""The PostgreSQL mirror on Java-written tables: after every run the target equals what Java's
reader returns at the checkpointed snapshot. Merge-on-read and copy-on-write UPDATE, DELETE and
MERGE, an UPDATE that changes the key, an UPDATE that moves a row to another partition, a key
deleted and re-inserted within one batch, compaction, INSERT OVERWRITE, equality deletes, schema
evolution (batch by batch); a v3 table with no key, mirrored by `_row_id`; and mode=history.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.mirror_checks import history_problems
from tests.support.mirror_workload import (
    ROW_ID_STEPS,
    create_evolving_table,
    create_keyed_table,
    create_keyless_v3_table,
    equality_delete_step,
    keyed_steps,
)
from tests.support.pg_mirror import mirror_url, query, row_set, target_table
from tests.support.workloads import COW, MOR, table_properties


def _config(catalog: Any, tmp_path: Path, pg_schema: str, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": catalog.name,
        "table": "ns.t",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": mirror_url(pg_schema),
        "consumer": "mirror",
        "chunk_rows": 3,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def _java_rows_at_cursor(catalog: Any, config: PipelineConfig) -> tuple[int, Any]:
    with open_store(config.state_url) as store:
        checkpoint = store.load(config.consumer_id)
    assert checkpoint is not None and checkpoint.inflight is None and checkpoint.cursor.snapshot_id is not None
    cursor = checkpoint.cursor.snapshot_id
    return cursor, catalog.snapshot_rows("t", cursor).table


def _run_and_check(catalog: Any, config: PipelineConfig, spark: Any, pg_schema: str) -> None:
    # `--engine local`: no session given, so the batches are read in this process
    with Pipeline(config, spark=None if config.engine == "local" else spark) as pipeline:
        pipeline.run()
    cursor, java = _java_rows_at_cursor(catalog, config)
    assert cursor == catalog.current_snapshot_id("t")
    columns = tuple(java.column_names)
    target, expected = row_set(target_table(pg_schema), columns), row_set(java, columns)
    assert target == expected, f"at {cursor}: target-only {set(target) - set(expected)}, java-only " + (
        f"{set(expected) - set(target)}"
    )


@pytest.mark.parametrize(
    ("mode", "partitioned", "engine"),
    [(MOR, True, "spark"), (COW, False, "spark"), (MOR, True, "local")],
    ids=["mor-partitioned", "cow", "mor-partitioned-in-process"],
)
def test_mirror_equals_java_after_every_run(
    catalog: Any,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_schema: str,
    mode: str,
    partitioned: bool,
    engine: str,
) -> None:
    """Java writes (position deletes, then equality deletes on MoR); icetail mirrors, on Spark or in process."""
    catalog.set_env(monkeypatch)
    create_keyed_table(catalog, mode, partitioned)
    config = _config(catalog, tmp_path, pg_schema, engine=engine)
    for statements in keyed_steps(partitioned):
        for statement in statements:
            catalog.sql(statement)
        _run_and_check(catalog, config, spark, pg_schema)
    if mode == MOR:
        equality_delete_step(catalog)
        _run_and_check(catalog, config, spark, pg_schema)


def test_v3_table_without_a_key_is_mirrored_by_row_id(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    catalog.set_env(monkeypatch)
    create_keyless_v3_table(catalog)
    config = _config(catalog, tmp_path, pg_schema)
    for statements in ROW_ID_STEPS:
        for statement in statements:
            catalog.sql(statement)
        with Pipeline(config, spark=spark) as pipeline:
            pipeline.run()
        _, java = _java_rows_at_cursor(catalog, config)
        target = target_table(pg_schema)
        assert Counter(row_set(target, ("id", "v"))) == Counter(row_set(java, ("id", "v")))
        assert len(set(target.column("_row_id").to_pylist())) == target.num_rows
    primary_key = query(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
        (f'"{pg_schema}".t',),
    )
    assert primary_key == [("_row_id",)]


@pytest.mark.parametrize("engine", ["spark", "local"], ids=["spark", "in-process"])
def test_history_holds_the_source_at_every_snapshot(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str, engine: str
) -> None:
    """mode=history: for every snapshot S followed, the versions valid at S are the source's rows at S;
    an UPDATE that changes nothing makes no version. On Spark and in process."""
    catalog.set_env(monkeypatch)
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, MOR).items())
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint NOT NULL, p int, v string) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ({props})"
    )
    catalog.sql("ALTER TABLE {cat}.ns.t SET IDENTIFIER FIELDS id")
    config = _config(catalog, tmp_path, pg_schema, sink_url=mirror_url(pg_schema, extra="&mode=history"), engine=engine)
    steps = [
        ["INSERT INTO {cat}.ns.t VALUES (1L, 0, 'a'), (2L, 1, 'b'), (3L, 0, 'c'), (4L, 1, 'd')"],
        ["UPDATE {cat}.ns.t SET v = 'b2' WHERE id = 2", "UPDATE {cat}.ns.t SET v = 'b3' WHERE id = 2"],
        ["DELETE FROM {cat}.ns.t WHERE id = 3", "INSERT INTO {cat}.ns.t VALUES (3L, 1, 'c again')"],
        ["UPDATE {cat}.ns.t SET id = 40 WHERE id = 4", "UPDATE {cat}.ns.t SET v = v WHERE id = 1"],
        ["UPDATE {cat}.ns.t SET p = 1 - p WHERE id = 1"],
    ]
    for statements in steps:
        for statement in statements:
            catalog.sql(statement)
        with Pipeline(config, spark=None if engine == "local" else spark) as pipeline:
            pipeline.run()
    snapshots = catalog.snapshot_ids("t")
    table = target_table(pg_schema)
    commit_ms = {s.snapshot_id: s.timestamp_ms for s in catalog.snapshots("t")}
    rows_at = lambda s: catalog.snapshot_rows("t", s).table  # noqa: E731
    problems = history_problems(table, snapshots, rows_at, ("id", "p", "v"), commit_ms=commit_ms)
    assert not problems, "\n".join(problems)  # the check the Iceberg history's tests make
    versions = table.to_pylist()
    ones = [r for r in versions if r["id"] == 1]
    assert len(ones) == 2, ones  # inserted, moved to another partition; the no-op UPDATE made no version


def test_mirror_follows_schema_evolution_batch_by_batch(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    """Java evolves the table between writes (ADD, RENAME, ALTER TYPE int -> bigint, DROP); each batch
    ends before a schema change, and after each the target has the source's columns and rows."""
    catalog.set_env(monkeypatch)
    create_evolving_table(catalog)
    config = _config(catalog, tmp_path, pg_schema)
    batches = 0
    with Pipeline(config, spark=spark) as pipeline:
        while (outcome := pipeline.run_batch()) is not None:
            batches += 1
            java = catalog.snapshot_rows("t", outcome.to_snapshot_inclusive).table
            target = target_table(pg_schema)
            assert sorted(target.column_names) == sorted(java.column_names), outcome
            columns = tuple(java.column_names)
            assert row_set(target, columns) == row_set(java, columns), f"after batch to {outcome.to_snapshot_inclusive}"
    assert batches == 5  # one per schema
    types = dict(query("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                       "%s::regclass AND attnum > 0 AND NOT attisdropped", (f'"{pg_schema}".t',)))  # fmt: skip
    assert types == {"id": "bigint", "n": "bigint", "w": "text", "e": "bigint"}
