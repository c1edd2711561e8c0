"""`run` into an Iceberg sink commits staged chunks in groups: fewer sink snapshots, the same rows.

A real source table (pyiceberg, SQL catalog on SQLite) of small files, a real Spark reader and a
real Iceberg sink table. Chunks of 100 rows; a group is committed once it holds 300 rows, at the
end of a batch and on a stop request. Crashes between a group's sink commit and its offsets are
covered by tests/pipeline/test_crash.py, which runs the Iceberg sink with groups.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.iceberg.ledger import CHUNK_ID_PROPERTY, CHUNK_IDS_PROPERTY
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.sinks import SinkSpec, make_sink

FILES = 3
ROWS_PER_FILE = 200  # two chunks of 100 rows per file


@dataclasses.dataclass(frozen=True)
class Source:
    catalog: LocalCatalog
    table: Table
    expected: pa.Table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Source:
    cat = new_catalog(tmp_path_factory.mktemp("group-source"), "groupsrc")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    catalog = cat.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", schema=schema)
    for f in range(FILES):  # one append per file: three snapshots, six chunks
        ids = list(range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE))
        table.append(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=schema))
    table = cat.load("ns.events")
    return Source(cat, table, read_changes(table, None, table.metadata.current_snapshot_id, spark=spark))


def _config(source: Source, sink: SinkSpec, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": "ns.events",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": sink.url,
        "consumer": "grouped",
        "chunk_rows": 100,
        "sink_commit_rows": 300,
        "sink_commit_interval_seconds": 600.0,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def _chunks_per_snapshot(sink: SinkSpec) -> list[int]:
    assert sink.catalog is not None and sink.ident is not None
    counts = []
    for snapshot in sink.catalog.load(sink.ident).snapshots():
        summary = snapshot.summary
        assert summary is not None
        if summary.get(CHUNK_ID_PROPERTY) is not None:
            counts.append(1)
        elif summary.get(CHUNK_IDS_PROPERTY) is not None:
            counts.append(len(summary[CHUNK_IDS_PROPERTY].split(",")))
    return counts


def _assert_delivered_once(source: Source, sink: SinkSpec, tmp_path: Path) -> None:
    schema = source.expected.schema
    assert not diff_report(row_multiset(source.expected, schema), row_multiset(sink.read(), schema))
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        checkpoint = store.load("grouped")
    finally:
        store.close()
    assert checkpoint is not None and checkpoint.inflight is None
    assert checkpoint.cursor.snapshot_id == source.table.metadata.current_snapshot_id


@pytest.mark.parametrize(
    ("per_batch", "sink_commit_rows", "groups"),
    [
        pytest.param(None, 300, [3, 3], id="one-batch-groups-of-300-rows"),
        pytest.param(2, 300, [3, 1, 2], id="a-batch-end-commits-what-waits"),
        pytest.param(None, 0, [1] * 6, id="sink-commit-rows-0-commits-each-chunk"),
    ],
)
def test_staged_chunks_are_committed_to_the_iceberg_sink_in_groups(
    source: Source,
    tmp_path: Path,
    spark: Any,
    use_catalogs: Any,
    per_batch: int | None,
    sink_commit_rows: int,
    groups: list[int],
) -> None:
    sink = make_sink("iceberg", tmp_path)
    assert sink.catalog is not None
    use_catalogs(source.catalog, sink.catalog)
    config = _config(source, sink, tmp_path, max_snapshots_per_batch=per_batch, sink_commit_rows=sink_commit_rows)
    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert all(o.completed for o in outcomes), outcomes
    assert _chunks_per_snapshot(sink) == groups
    _assert_delivered_once(source, sink, tmp_path)


def test_a_stop_request_commits_the_waiting_group_and_a_resumed_run_finishes_the_batch(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    sink = make_sink("iceberg", tmp_path)
    assert sink.catalog is not None
    use_catalogs(source.catalog, sink.catalog)
    config = _config(source, sink, tmp_path)
    stop = threading.Event()
    with Pipeline(config, spark=spark, stop_event=stop, on_chunk=lambda _: stop.set()) as pipeline:
        outcomes = pipeline.run()
    assert outcomes and not outcomes[-1].completed, outcomes
    # the first chunk waited in a group of one: the stop committed it, rows and offset
    assert _chunks_per_snapshot(sink) == [1]
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        checkpoint = store.load("grouped")
    finally:
        store.close()
    assert checkpoint is not None and checkpoint.inflight is not None
    assert sum(p.rows_emitted for p in checkpoint.inflight.progress) == 100

    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert outcomes[0].resumed and all(o.completed for o in outcomes), outcomes
    assert _chunks_per_snapshot(sink) == [1, 3, 2]
    _assert_delivered_once(source, sink, tmp_path)
