"""The Iceberg mirror on Java-written tables: after every run the target, read by Java's reader,
equals what Java's reader returns for the source at the checkpointed snapshot. Merge-on-read
(partitioned) and copy-on-write UPDATE, DELETE and MERGE, an UPDATE that changes the key, a key
deleted and re-inserted within one batch, compaction, INSERT OVERWRITE, equality deletes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.pipeline import Pipeline, PipelineConfig
from icetail.state.store import open_store
from tests.support.pg_mirror import row_set
from tests.support.workloads import COW, MOR, table_properties

TARGET = "ns.m"


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
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, mode).items())
    part = " PARTITIONED BY (p)" if partitioned else ""
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint NOT NULL, p int, v string, d double) USING iceberg{part} "
        f"TBLPROPERTIES ({props})"
    )
    catalog.sql("ALTER TABLE {cat}.ns.t SET IDENTIFIER FIELDS id")
    config = PipelineConfig(
        catalog=catalog.name,
        table="ns.t",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        sink_url=f"iceberg://{catalog.name}/{TARGET}?mode=mirror",
        consumer="mirror",
        chunk_rows=3,
    )
    rows = ", ".join(f"({i}L, {i % 2}, 'v{i}', {i}.5D)" for i in range(1, 21))
    steps = [
        [f"INSERT INTO {{cat}}.ns.t VALUES {rows}"],
        ["UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id IN (2, 3, 8)", "DELETE FROM {cat}.ns.t WHERE id IN (4, 9)"],
        [
            "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (5L, 'm', 1), (30L, 'new', 1) "
            "AS s(id, v, op)) s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v, t.d = t.d + 1D "
            "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
            "UPDATE {cat}.ns.t SET id = id + 100 WHERE id IN (6, 11)",  # the key changes
        ],
        [
            "DELETE FROM {cat}.ns.t WHERE id = 7",  # deleted and re-inserted in one batch
            "INSERT INTO {cat}.ns.t VALUES (7L, 1, 'seven again', 7.0D)",
            "UPDATE {cat}.ns.t SET p = 1 - p, v = 'moved' WHERE id = 10",  # another partition, same key
        ],
        ["CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))"],
        ["INSERT OVERWRITE {cat}.ns.t SELECT id, p, concat(v, '-ow'), d FROM {cat}.ns.t WHERE id < 15"],
    ]
    for statements in steps:
        for statement in statements:
            catalog.sql(statement)
        _run_and_check(catalog, config, spark)
    if mode == MOR:  # equality deletes (as Flink writes them), committed through the Java API
        catalog.write_equality_deletes("t", "SELECT 2L AS id UNION ALL SELECT 13L AS id")
        catalog.sql("INSERT INTO {cat}.ns.t VALUES (2L, 0, 'two again', 2.0D)")
        _run_and_check(catalog, config, spark)
