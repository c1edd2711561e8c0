"""`--format debezium`: envelopes replayed in order give Java's rows, after every run (issue 25).

The Java-written keyed workload (UPDATE, DELETE, MERGE, a key change, a key deleted and
re-inserted, a partition move, compaction, INSERT OVERWRITE, equality deletes) is followed by
`run` into a JSON lines sink with `--format debezium`. Replaying every envelope (c and r add
`after`, u replaces `before` by `after`, d removes `before`) must give the table's rows as Java
reads them; every record names its commit's snapshot id and sequence number. A full start
(`--start full`) into a callback sink gives one `r` record per row. On Spark and in process.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.python.callback import CallbackSink
from tests.support.mirror_workload import create_keyed_table, keyed_steps
from tests.support.workloads import MOR

COLUMNS = ("id", "p", "v", "d")


def replayed(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    rows: Counter[tuple[Any, ...]] = Counter()
    for record in records:
        if record["op"] in ("u", "d"):
            before = tuple(record["before"][c] for c in COLUMNS)
            assert rows[before] > 0, f"{record['op']} of a row that is not there: {record}"
            rows[before] -= 1
        if record["op"] in ("c", "r", "u"):
            rows[tuple(record["after"][c] for c in COLUMNS)] += 1
    return +rows


def java_rows(catalog: Any) -> Counter[tuple[Any, ...]]:
    table = catalog.snapshot_rows("t", catalog.current_snapshot_id("t")).table
    return Counter(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))


@pytest.mark.parametrize("engine", ["spark", "local"], ids=["spark", "in-process"])
def test_envelopes_replay_to_the_source_after_every_run(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    catalog.set_env(monkeypatch)
    session = None if engine == "local" else spark  # `--engine local`: no session, read in this process
    create_keyed_table(catalog, MOR, partitioned=False)
    sink = tmp_path / "cdc.jsonl"
    config = PipelineConfig(
        catalog.name, "ns.t", f"sqlite:///{tmp_path}/state.db", f"jsonl://{sink}", consumer="c",
        output_format="debezium", engine=engine,
    )  # fmt: skip
    for statements in keyed_steps(partitioned=False):
        for statement in statements:
            catalog.sql(statement)
        with Pipeline(config, spark=session) as pipeline:
            pipeline.run()
        records = [json.loads(line) for line in sink.read_text().splitlines()]
        assert replayed(records) == java_rows(catalog)
    assert {"c", "u", "d"} <= {r["op"] for r in records}
    table = catalog.load_table("t")
    for record in records:
        source = record["source"]
        snapshot = table.snapshot_by_id(source["snapshot_id"])
        assert source["sequence_number"] == snapshot.sequence_number
        assert record["ts_ms"] == source["ts_ms"] == snapshot.timestamp_ms
        where = (source["connector"], source["db"], source["table"], source["snapshot"])
        assert where == ("icetail", "ns", "t", "false")
    updates = [r for r in records if r["op"] == "u"]
    assert all(r["before"]["id"] == r["after"]["id"] for r in updates)  # a pair is one record

    received: list[pa.Table] = []
    full = PipelineConfig(
        catalog.name, "ns.t", f"sqlite:///{tmp_path}/state.db", f"parquet://{tmp_path}/unused", consumer="full",
        start="full", output_format="debezium", engine=engine,
    )  # fmt: skip
    sink_of_callback = CallbackSink(lambda key, rows: received.append(rows))
    with Pipeline(full, spark=session, sink=sink_of_callback) as pipeline:
        pipeline.run()
    envelopes = pa.concat_tables(received).to_pylist()
    assert {r["op"] for r in envelopes} == {"r"}
    assert {r["source"]["snapshot"] for r in envelopes} == {"true"}
    assert replayed(envelopes) == java_rows(catalog)
