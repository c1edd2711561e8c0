"""Bounded batches (issue 45 §5): `--max-rows-per-batch` and `--max-bytes-per-batch` end a batch at
the first chunk boundary at or past the bound, inside a snapshot if need be; the next batch resumes
from the committed row offsets, and the sink ends up with every change exactly once.

A real source table (pyiceberg, SQL catalog on SQLite) of three appends in row groups of 100 rows
and a copy-on-write overwrite that rewrites 200 rows (its updates paired by `id`: reconciled as a
whole, so a bound never cuts it); the oracle is `read_changes` on Spark over the whole history.
Both engines: on Spark, and in the run's own process.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import LessThan

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.sinks import make_sink

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
CHUNK_ROWS = 100


@dataclasses.dataclass(frozen=True)
class Source:
    catalog: LocalCatalog
    expected: pa.Table
    current: int
    overwrite_rows: int  # change rows of the reconciled snapshot (delivered whole)


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Source:
    cat = new_catalog(tmp_path_factory.mktemp("limits-source"), "limitsrc")
    catalog = cat.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", schema=SCHEMA, properties={"write.parquet.row-group-limit": "100"})
    for n in range(3):
        table.append(_rows(range(n * 1000, (n + 1) * 1000), "a"))
    table.overwrite(_rows(range(200), "u"), overwrite_filter=LessThan("id", 200))
    table = cat.load("ns.events")
    current = table.metadata.current_snapshot_id
    assert current is not None
    expected = read_changes(table, None, current, spark=spark, identifier_columns=("id",))
    last = expected.filter(pa.compute.equal(expected.column("_commit_snapshot_id"), current))
    return Source(cat, expected, current, last.num_rows)


def _config(source: Source, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": "ns.events",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": f"parquet://{tmp_path / 'sink'}",
        "consumer": "bounded",
        "chunk_rows": CHUNK_ROWS,
        "identifier_columns": ("id",),
    }
    values.update(overrides)
    return PipelineConfig(**values)


def _run(config: PipelineConfig, spark: Any) -> list[Any]:
    with Pipeline(config, spark=None if config.engine == "local" else spark) as pipeline:
        return pipeline.run()


def _assert_delivered_once(source: Source, tmp_path: Path) -> None:
    sink = make_sink("parquet", tmp_path)
    schema = source.expected.schema
    assert not diff_report(row_multiset(source.expected, schema), row_multiset(sink.read(), schema))
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        checkpoint = store.load("bounded")
    assert checkpoint is not None and checkpoint.inflight is None
    assert checkpoint.cursor.snapshot_id == source.current


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_a_row_bound_ends_batches_inside_snapshots_and_the_next_batch_resumes(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any, engine: str
) -> None:
    use_catalogs(source.catalog)
    outcomes = _run(_config(source, tmp_path, engine=engine, max_rows_per_batch=250), spark)
    rows = [o.rows for o in outcomes]
    assert all(o.limited for o in outcomes[:-1]) and outcomes[-1].completed, rows
    assert sum(rows) == source.expected.num_rows, rows
    # a bounded batch ends at the first chunk at or past 250 rows: 300 rows of 100-row chunks; the
    # reconciled overwrite is delivered whole, in the batch where it begins
    for outcome in outcomes[:-1]:
        assert 250 <= outcome.rows < 250 + CHUNK_ROWS or outcome.rows >= source.overwrite_rows, rows
    assert len(outcomes) >= 3000 // 300, rows
    assert any(o.resumed for o in outcomes)  # a snapshot's splits spread over several batches
    _assert_delivered_once(source, tmp_path)


def test_a_byte_bound_ends_batches_at_chunks_and_once_is_one_bounded_batch(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    use_catalogs(source.catalog)
    config = _config(source, tmp_path, engine="local", max_bytes_per_batch=1)  # every chunk reads a byte
    with Pipeline(config) as pipeline:
        first = pipeline.run(once=True)
        assert len(first) == 1 and first[0].limited and first[0].chunks == 1, first
        rest = pipeline.run()
    assert sum(o.rows for o in first + rest) == source.expected.num_rows
    _assert_delivered_once(source, tmp_path)


@pytest.mark.parametrize("field", ["max_rows_per_batch", "max_bytes_per_batch"])
def test_a_bound_below_one_is_refused(source: Source, tmp_path: Path, field: str) -> None:
    with pytest.raises(ConfigError, match="must be >= 1"):
        _config(source, tmp_path, **{field: 0})
