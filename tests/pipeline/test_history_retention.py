"""`history_retention` (issue 24 §4): the store keeps that many finished batches per consumer and
prunes the rest as each batch finishes, and recovery stays exact at its minimum, 1.

A consumer with `history_retention=1` follows the crash tests' mixed table (~11 snapshots, a schema
change) in batches of 2 snapshots and 100-row chunks; every batch is stopped after its first chunk
and resumed by a new pipeline (a restart), on SQLite and on PostgreSQL. The sink must end with
exactly the table's change stream (`read_changes`, ordinals included: the next batch's ordinals
come from the newest history entry), and the store must hold one history row, no split rows.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import HISTORY_LIMIT
from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.checkpoints import raw_query
from tests.support.compare import diff_report, row_multiset
from tests.support.sinks import read_parquet_sink
from tests.support.tables import build_mixed_table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalCatalog, Table]:
    cat = new_catalog(tmp_path_factory.mktemp("retention-source"), "retsrc")
    return cat, build_mixed_table(cat, "ns.events")


@pytest.mark.parametrize("state_kind", ["sqlite", "postgresql"])
def test_recovery_is_exact_with_one_batch_of_history(
    source: tuple[LocalCatalog, Table], tmp_path: Path, spark: Any, use_catalogs: Any, state_url_factory: Any,
    state_kind: str,
) -> None:  # fmt: skip
    cat, table = source
    use_catalogs(cat)
    state_url = state_url_factory(state_kind)
    config = PipelineConfig(
        catalog=cat.name,
        table="ns.events",
        state_url=state_url,
        sink_url=f"parquet://{tmp_path / 'sink'}",
        consumer="kept-one",
        max_snapshots_per_batch=2,
        chunk_rows=100,
        history_retention=1,
    )
    interrupted = 0
    for _ in range(500):  # a stopped run, then a restart, until caught up
        stop = threading.Event()
        with Pipeline(config, spark=spark, stop_event=stop, on_chunk=lambda _, event=stop: event.set()) as pipeline:
            outcomes = pipeline.run()
        interrupted += sum(1 for o in outcomes if not o.completed)
        with open_store(state_url) as store:
            checkpoint = store.load("kept-one")
            history = store.history("kept-one")
        assert len(history) <= 1, history  # pruned as each batch finishes
        assert checkpoint is not None
        if checkpoint.cursor.snapshot_id == table.metadata.current_snapshot_id and checkpoint.inflight is None:
            break
    assert interrupted >= 3, "the batches should have been stopped midway and resumed"
    expected = read_changes(table, spark=spark)
    schema = expected.schema
    got = read_parquet_sink(tmp_path / "sink")
    assert got is not None
    assert not diff_report(row_multiset(expected, schema), row_multiset(got, schema))
    assert raw_query(state_url, "SELECT COUNT(*) FROM icetail_history") == [(1,)]
    assert raw_query(state_url, "SELECT COUNT(*) FROM icetail_inflight_splits") == [(0,)]


def test_history_retention_default_and_bounds(tmp_path: Path) -> None:
    base = {"catalog": "c", "table": "ns.t", "state_url": "sqlite:///s.db", "sink_url": "parquet:///o"}
    assert PipelineConfig(**base).history_retention == HISTORY_LIMIT == 100
    with pytest.raises(ConfigError, match="history_retention must be >= 1"):
        PipelineConfig(**base, history_retention=0)
