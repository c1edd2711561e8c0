"""`run` chooses the engine per batch: a small batch is read in this process, a big one on Spark,
and a batch begun by one engine is finished by the other, exactly once (issue 45).

A real source table (pyiceberg, SQL catalog on SQLite) whose history alternates small appends, a
big append and a copy-on-write overwrite (a snapshot reconciled whole: update pairing by `id`);
real sinks (parquet, staged by the reading side; Iceberg, grouped commits); the oracle is
`read_changes` on Spark over the same range. `--local-max-bytes` sits between the small and
the big commits' file bytes, so the engine really alternates.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import LessThan
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.sinks import SinkSpec, make_sink

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@dataclasses.dataclass(frozen=True)
class Source:
    catalog: LocalCatalog
    table: Table
    expected: pa.Table
    between_bytes: int  # more than any small commit's files, less than the big one's
    engines: list[str]  # each snapshot's engine, in commit order: spark for the big append only


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"{tag}{i}-{'x' * 40}" for i in ids]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Source:
    cat = new_catalog(tmp_path_factory.mktemp("engines-source"), "enginesrc")
    catalog = cat.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", schema=SCHEMA, properties={"write.parquet.row-group-limit": "500"})
    table.append(_rows(range(50), "a"))  # small
    table.append(_rows(range(1000, 21000), "b"))  # big
    big_id = table.metadata.current_snapshot_id
    table.append(_rows(range(50, 100), "c"))  # small
    table.overwrite(_rows(range(10), "u"), overwrite_filter=LessThan("id", 10))  # small, reconciled whole
    table = cat.load("ns.events")
    sizes = {s.snapshot_id: int((s.summary or {}).get("added-files-size", "0") or 0) for s in table.snapshots()}
    big = sizes.pop(big_id)
    small = max(sizes.values())
    assert small * 8 < big, (small, big)
    expected = read_changes(table, None, table.metadata.current_snapshot_id, spark=spark, identifier_columns=("id",))
    engines = ["spark" if s.snapshot_id == big_id else "local" for s in table.snapshots()]
    return Source(cat, table, expected, (small * 8 + big) // 2, engines)


def _config(source: Source, sink: SinkSpec, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": "ns.events",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": sink.url,
        "consumer": "engines",
        "max_snapshots_per_batch": 1,
        "chunk_rows": 2000,
        "identifier_columns": ("id",),
        "local_max_bytes": source.between_bytes,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def _assert_delivered_once(source: Source, sink: SinkSpec, tmp_path: Path) -> None:
    schema = source.expected.schema
    got = sink.read()
    assert got is not None
    assert not diff_report(row_multiset(source.expected, schema), row_multiset(got, schema))
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        checkpoint = store.load("engines")
    finally:
        store.close()
    assert checkpoint is not None and checkpoint.inflight is None
    assert checkpoint.cursor.snapshot_id == source.table.metadata.current_snapshot_id


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_small_batches_are_read_in_process_and_the_big_one_on_spark(
    source: Source, tmp_path: Path, use_catalogs: Any, kind: str
) -> None:
    sink = make_sink(kind, tmp_path)
    use_catalogs(*(c for c in (source.catalog, sink.catalog) if c is not None))
    with Pipeline(_config(source, sink, tmp_path)) as pipeline:  # no session given: its own, on need
        outcomes = pipeline.run()
        started = pipeline.started_own_session
    assert [o.engine for o in outcomes] == source.engines, outcomes
    assert all(o.completed for o in outcomes)
    assert started  # the big batch started the pipeline's own session
    _assert_delivered_once(source, sink, tmp_path)
    # a batch read in process is written ahead whole (no reconcile partitions: they are Spark tasks)
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        shapes = [entry.shape for entry in reversed(store.history("engines", 10))]
    finally:
        store.close()
    assert [s.reconcile_partition_bytes is None for s in shapes] == [e == "local" for e in source.engines], shapes


def test_a_run_of_small_batches_starts_no_spark_session(source: Source, tmp_path: Path, use_catalogs: Any) -> None:
    sink = make_sink("parquet", tmp_path)
    use_catalogs(source.catalog)
    config = _config(source, sink, tmp_path, max_snapshots_per_batch=1, local_max_bytes=1 << 30)
    with Pipeline(config) as pipeline:
        outcomes = pipeline.run()
        started = pipeline.started_own_session
    assert {o.engine for o in outcomes} == {"local"} and not started
    _assert_delivered_once(source, sink, tmp_path)


@pytest.mark.parametrize(
    ("first", "then"),
    [pytest.param("local", "spark", id="begun-in-process-finished-on-spark"),
     pytest.param("spark", "local", id="begun-on-spark-finished-in-process")],
)  # fmt: skip
def test_a_batch_begun_by_one_engine_is_finished_by_the_other_exactly_once(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any, first: str, then: str
) -> None:
    """One batch of every snapshot, in chunks of 2,000 rows, stopped after its first chunk is
    committed; resumed with the other engine from the committed offsets."""
    sink = make_sink("parquet", tmp_path)
    use_catalogs(source.catalog)
    config = _config(source, sink, tmp_path, max_snapshots_per_batch=None, engine=first)
    stop = threading.Event()
    session = spark if first == "spark" else None
    with Pipeline(config, spark=session, stop_event=stop, on_chunk=lambda _: stop.set()) as pipeline:
        outcomes = pipeline.run()
    assert len(outcomes) == 1 and not outcomes[0].completed and outcomes[0].engine == first, outcomes
    resumed_config = dataclasses.replace(config, engine=then)
    with Pipeline(resumed_config, spark=spark if then == "spark" else None) as pipeline:
        outcomes = pipeline.run()
    assert outcomes[0].resumed and outcomes[0].completed and outcomes[0].engine == then, outcomes
    _assert_delivered_once(source, sink, tmp_path)
