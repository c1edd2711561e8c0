"""An upgrade of icetail while a batch is in flight resumes it exactly.

A run of this release is crashed half way through a batch; its store is then rewritten into
exactly what the previous release writes (schema 2: the batch's shape only in its id, split
texts without a format version), and this release opens it, migrates it and resumes: the same
chunk size as the crashed run (not the restart's), the same `_change_ordinal`s, and the sink
holds exactly `read_changes` of the table.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.checkpoint import BatchShape
from icetail.state.codec import VERSION_KEY
from icetail.state.migrations import META_DDL, MIGRATIONS
from icetail.state.store import open_store
from tests.support.catalogs import new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.sinks import CrashingSink, SimulatedCrash
from tests.support.tables import BASE_SCHEMA, make_rows

TABLE = "ns.up"
ROWS, ROW_GROUP_ROWS, CHUNK_ROWS = 20_000, 2_000, 800  # chunks of 800, 800, 400 per row group
# BatchShape's columns: schemas 3, 5, 6, 7, 9
SHAPE_COLUMNS = (
    "chunk_rows",
    "first_ordinal",
    "snapshot_count",
    "collapsed",
    "net",
    "schema_id",
    "reconcile_partition_bytes",
    "net_partitioned",
)


def _columns(conn: sqlite3.Connection) -> dict[str, list[str]]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}


def downgrade_to_previous_release(db: Path, tmp_path: Path) -> None:
    """Rewrite a store into what icetail wrote before schema 3 and split format 2 (no shape, no schema
    ids), and check it is exactly that."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TABLE icetail_stopped_consumers")  # schema 8
        conn.execute("DROP TABLE icetail_replicas")  # schema 10
        conn.execute("ALTER TABLE icetail_consumers DROP COLUMN branch")  # schema 4
        for column in ("parts_done", "parts_key"):  # schema 7
            conn.execute(f"ALTER TABLE icetail_inflight_splits DROP COLUMN {column}")
        for table in ("icetail_inflight_batches", "icetail_history"):
            for column in SHAPE_COLUMNS:
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        rows = conn.execute("SELECT consumer, batch_id, split_id, split_json FROM icetail_inflight_splits").fetchall()
        for consumer, batch_id, split_id, text in rows:
            raw = json.loads(text)
            assert raw.pop(VERSION_KEY) == 4
            del raw["task"]["commit"]["schema_id"]
            assert raw["task"]["data_file"].pop("first_row_id") is None  # a v2 table: no row lineage
            conn.execute(
                "UPDATE icetail_inflight_splits SET split_json = ? "
                "WHERE consumer = ? AND batch_id = ? AND split_id = ?",
                (json.dumps(raw, sort_keys=True, separators=(",", ":")), consumer, batch_id, split_id),
            )
        conn.execute("UPDATE icetail_meta SET value = '2' WHERE key = 'schema_version'")
    downgraded = _columns(conn)
    conn.close()
    previous = sqlite3.connect(tmp_path / "previous-release.db")  # the tables the previous release creates
    with previous:
        previous.execute(META_DDL)
        for statement in (s for m in MIGRATIONS if m.version <= 2 for s in m.statements):
            previous.execute(statement)
    assert downgraded == _columns(previous)
    previous.close()


def test_a_batch_written_by_the_previous_release_resumes_exactly(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = new_catalog(tmp_path / "source", "upgcat")
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(
        TABLE,
        schema=BASE_SCHEMA,
        properties={"write.parquet.row-group-limit": str(ROW_GROUP_ROWS), "write.target-file-size-bytes": str(1 << 30)},
    )
    table.append(make_rows(BASE_SCHEMA, range(-10, 0)))  # S1: one chunk
    table.append(make_rows(BASE_SCHEMA, range(ROWS)))  # S2: 10 row groups, 30 chunks
    table.append(make_rows(BASE_SCHEMA, range(ROWS, ROWS + 5)))  # S3: one chunk
    table = cat.load(TABLE)
    use_catalogs(cat)
    state = tmp_path / "state.db"
    sink_dir = tmp_path / "sink"
    config = PipelineConfig(
        cat.name,
        TABLE,
        f"sqlite:///{state}",
        f"parquet://{sink_dir}",
        consumer="up",
        chunk_rows=CHUNK_ROWS,
        max_snapshots_per_batch=1,
    )
    # S1's batch finishes (write 1); S2's batch crashes after its 9th chunk landed in the sink, uncommitted
    crashing = CrashingSink(ParquetDirSink(sink_dir, consumer="up"), 1 + 9, after_write=True)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()
    written_before = {p.name for p in sink_dir.glob("*.parquet")}
    with open_store(config.state_url) as store:
        checkpoint = store.load("up")
    assert checkpoint is not None and checkpoint.inflight is not None
    expected_shape = BatchShape(
        CHUNK_ROWS,
        1,
        1,
        False,
        schema_id=table.metadata.current_schema_id,
        reconcile_partition_bytes=config.reconcile_partition_bytes,
    )
    assert checkpoint.inflight.batch.shape == expected_shape
    assert checkpoint.inflight.rows_emitted == 2 * ROW_GROUP_ROWS + 2 * CHUNK_ROWS  # 8 chunks committed

    downgrade_to_previous_release(state, tmp_path)

    # the upgraded release, configured otherwise, resumes the old batch as it was started
    upgraded = dataclasses.replace(config, chunk_rows=300, max_snapshots_per_batch=None)
    with Pipeline(upgraded, sink=ParquetDirSink(sink_dir, consumer="up"), spark=spark) as second:
        outcomes = second.run()
    assert [(o.resumed, o.completed, o.snapshots) for o in outcomes] == [(True, True, 1), (False, True, 1)]
    assert outcomes[0].chunks == 30 - 8  # 800-row chunks again, from the first uncommitted one
    assert outcomes[0].rows == ROWS - checkpoint.inflight.rows_emitted
    names = {p.name for p in sink_dir.glob("*.parquet")}
    assert written_before <= names and len(names) == 1 + 30 + 1

    expected = read_changes(table, spark=spark)
    got = pq.read_table(sink_dir)
    assert sorted(set(got.column("_change_ordinal").to_pylist())) == [0, 1, 2]
    schema = expected.schema
    report = diff_report(row_multiset(expected, schema), row_multiset(got, schema))
    assert not report, report
