"""`icetail run --net`: each batch's net changes, exactly once under SIGKILL, mode kept on resume.

The source is the crash tests' mixed table (~11 snapshots: appends, a copy-on-write delete with
carry-overs, a pyiceberg overwrite as delete + append of the same ids, deletes of rows appended
shortly before). With `--max-snapshots-per-batch 3` the batches are fixed by the history, so the
stream a consumer must end with is known in advance: for each batch (from, to] the API's
`read_changes(table, from, to, net=True)`, its ordinals shifted to count from the consumer's
start. A net batch is one sink write plus one state transaction; a resumed batch re-reads the
persisted splits and must write the same rows under the same key.
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import same_schema_prefix
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.crash import assert_exactly_once_under_kills, kill_schedule
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import make_sink
from tests.support.tables import build_mixed_table

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261125"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))
PER_BATCH = 3
KEYS = ["id"]


@dataclasses.dataclass(frozen=True)
class NetSource:
    catalog: LocalCatalog
    table: Table
    net_stream: pa.Table  # what a --net consumer delivers, batch by batch
    full_stream: pa.Table  # what a consumer without --net delivers


def consumer_stream(
    table: Table, per_batch: int | None, *, net: bool, spark: Any, first_batch_net: bool | None = None
) -> pa.Table:
    """A consumer's whole stream from `earliest` with batches of `per_batch` snapshots (None: no
    bound), each within one schema (a batch never spans a schema change), as the API computes it;
    `first_batch_net`: the first batch's mode when it differs (a batch resumed under another setting)."""
    current = table.metadata.current_snapshot_id
    assert current is not None
    parts, base, start = [], 0, None
    while start != current:
        batch = same_schema_prefix(table.metadata, snapshots_between(table.metadata, start, current))[:per_batch]
        end = batch[-1].snapshot_id
        batch_net = first_batch_net if (start is None and first_batch_net is not None) else net
        rows = read_changes(table, start, end, identifier_columns=KEYS, net=batch_net, spark=spark)
        ordinal = rows.schema.get_field_index("_change_ordinal")
        shifted = pc.add(rows.column(ordinal), pa.scalar(base, pa.int32())).cast(pa.int32())
        parts.append(rows.set_column(ordinal, rows.schema.field(ordinal), shifted))
        base += len(_ordinals(table, start, end))
        start = end
    final = table.schema().as_arrow()
    return pa.concat_tables(parts, promote_options="default").select(
        [f.name for f in final] + ["_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp"]
    )


def _ordinals(table: Table, start: int | None, end: int) -> list[int]:
    """The non-replace snapshots of (start, end]: each takes one ordinal."""
    return [
        s.snapshot_id
        for s in snapshots_between(table.metadata, start, end)
        if s.summary is None or s.summary.operation.value != "replace"
    ]


@pytest.fixture(scope="module")
def net_source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> NetSource:
    cat = new_catalog(tmp_path_factory.mktemp("net-source"), "netsrc")
    table = build_mixed_table(cat, "ns.events")
    net_stream = consumer_stream(table, PER_BATCH, net=True, spark=spark)
    full_stream = consumer_stream(table, PER_BATCH, net=False, spark=spark)
    # the batches must hold something to net: rows inserted and deleted in one batch, updates
    assert net_stream.num_rows < full_stream.num_rows - 20, (net_stream.num_rows, full_stream.num_rows)
    assert "UPDATE_BEFORE" in net_stream.column("_change_type").to_pylist()
    return NetSource(cat, table, net_stream, full_stream)


def _config(source: NetSource, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": "ns.events",
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "sink_url": f"parquet://{tmp_path / 'sink'}",
        "consumer": "net",
        "max_snapshots_per_batch": PER_BATCH,
        "chunk_rows": 100,
        "identifier_columns": tuple(KEYS),
        "net": True,
    }
    values.update(overrides)
    return PipelineConfig(**values)


def _sink_rows(tmp_path: Path) -> pa.Table:
    from tests.support.sinks import read_parquet_sink

    rows = read_parquet_sink(tmp_path / "sink")
    assert rows is not None
    return rows


def _stopped_after_first_chunk(config: PipelineConfig, spark: Any, tmp_path: Path) -> None:
    stop = threading.Event()
    with Pipeline(config, spark=spark, stop_event=stop, on_chunk=lambda _: stop.set()) as pipeline:
        outcomes = pipeline.run()
    assert outcomes and not outcomes[-1].completed, outcomes


@pytest.mark.parametrize("first_net", [True, False], ids=["net-then-plain", "plain-then-net"])
def test_a_resumed_batch_keeps_the_mode_it_began_with(
    net_source: NetSource, tmp_path: Path, spark: Any, use_catalogs: Any, first_net: bool
) -> None:
    """A batch stopped midway and resumed by a run configured the other way finishes as it began
    (its mode is in its persisted shape), so it is never half net and half every change."""
    use_catalogs(net_source.catalog)
    config = _config(net_source, tmp_path, net=first_net, max_snapshots_per_batch=None)
    _stopped_after_first_chunk(config, spark, tmp_path)
    with open_store(config.state_url) as store:
        checkpoint = store.load("net")
    assert checkpoint is not None and checkpoint.inflight is not None
    assert checkpoint.inflight.batch.shape.net is first_net
    done = [p for p in checkpoint.inflight.progress if p.done or p.next_row_exclusive]
    assert bool(done) is (not first_net), "a net batch commits all of its splits at once, or nothing"

    with Pipeline(dataclasses.replace(config, net=not first_net), spark=spark) as pipeline:
        outcomes = pipeline.run()
    # the resumed batch, then one batch per later schema (a batch never spans a schema change)
    assert [o.resumed for o in outcomes] == [True] + [False] * (len(outcomes) - 1), outcomes
    table = net_source.table
    expected = consumer_stream(table, None, net=not first_net, spark=spark, first_batch_net=first_net)
    schema = expected.schema
    assert not diff_report(row_multiset(expected, schema), row_multiset(_sink_rows(tmp_path), schema))


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_sigkill_net_batches_exactly_once(
    net_source: NetSource, tmp_path: Path, state_url_factory: Any, record_property: Any
) -> None:
    state_url = state_url_factory("sqlite")
    sink = make_sink("parquet", tmp_path)
    env = child_env([net_source.catalog], tmp_path / "spark")
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", net_source.catalog.name,
        "--table", "ns.events",
        "--state", state_url,
        "--sink", sink.url,
        "--consumer", "net-crash",
        "--until-caught-up",
        "--max-snapshots-per-batch", str(PER_BATCH),
        "--chunk-rows", "100",
        "--identifier-columns", ",".join(KEYS),
        "--net",
    ]  # fmt: skip
    assert_exactly_once_under_kills(
        cmd,
        env,
        state_url=state_url,
        consumer="net-crash",
        sink=sink,
        expected_rows=net_source.net_stream,
        current_snapshot_id=net_source.table.metadata.current_snapshot_id,
        schedule=kill_schedule(random.Random(f"{SEED}:net"), KILLS),
        logs=tmp_path / "logs",
        label=f"net seed {SEED}",
        record=record_property,
    )


def test_net_with_keep_carry_over_is_refused(net_source: NetSource, tmp_path: Path) -> None:
    from icetail.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="--net always cancels carry-over rows; drop --keep-carry-over"):
        _config(net_source, tmp_path, carry_over_removal=False)
