"""What the mirror tests share: a pipeline config into a mirror sink, and the check that a mirror's
target holds exactly the source's rows at the consumer's cursor (PostgreSQL and Iceberg alike)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from icetail.monitor.engine.pipeline import PipelineConfig
from icetail.state.store import open_store
from tests.support.pg_mirror import row_set


def mirror_config(catalog: str, tmp_path: Path, sink_url: str, **overrides: Any) -> PipelineConfig:
    """A consumer `mirror` of `catalog`'s ns.t into `sink_url`, state in SQLite, chunks of 7 rows."""
    values: dict[str, Any] = {
        "catalog": catalog,
        "table": "ns.t",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": sink_url,
        "consumer": "mirror",
        "chunk_rows": 7,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def assert_target_equals_source(source: Any, config: PipelineConfig, target: pa.Table, columns: Sequence[str]) -> None:
    """`target` holds exactly `source`'s ns.t rows (a pyiceberg catalog) at the consumer's cursor."""
    with open_store(config.state_url) as store:
        checkpoint = store.load(config.consumer_id)
    assert checkpoint is not None and checkpoint.inflight is None
    cursor = checkpoint.cursor.snapshot_id
    expected_rows = source.load("ns.t").scan(snapshot_id=cursor).to_arrow()
    got, expected = row_set(target, columns), row_set(expected_rows, columns)
    assert got == expected, f"at snapshot {cursor}: target-only {set(got) - set(expected)}, " + (
        f"source-only {set(expected) - set(got)}"
    )
