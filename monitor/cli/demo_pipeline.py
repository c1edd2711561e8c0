"""The demo's second half: plan, run the exactly-once pipeline into a parquet sink, show it all."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.table import Table

from icetail.monitor.cli.progress import describe
from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline, PipelineConfig
from icetail.monitor.planning.plan_report import format_plan
from icetail.monitor.planning.planner import Planner
from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import Metrics
from icetail.monitor.service.scheduler import batch_report


def run_demo_pipeline(root: str, table: Table, format_rows: Callable[[pa.Table], str]) -> int:
    name = ".".join(table.name())
    state, sink = f"sqlite:///{root}/state.db", f"parquet://{root}/sink"
    print(f"\n$ icetail plan --catalog demo --table {name}")
    print(format_plan(Planner(table).plan(None, None)))

    metrics = Metrics.create()
    config = PipelineConfig(
        catalog="demo", table=name, state_url=state, sink_url=sink, identifier_columns=("order_id",)
    )

    def record(outcome: BatchOutcome) -> None:
        metrics.record_batch(batch_report(config, outcome))

    print(f"\n$ icetail run --catalog demo --table {name} --state {state} --sink {sink} --identifier-columns order_id")
    with Pipeline(config, on_batch=record) as pipeline:
        for outcome in pipeline.run():
            print(describe(outcome))
        again = pipeline.run()
    print(f"a second run on the caught-up consumer delivers {len(again)} batches (exactly once)")

    rows = ds.dataset(os.path.join(root, "sink"), format="parquet").to_table()
    rows = rows.sort_by([("_change_ordinal", "ascending")])
    print(f"\nthe sink {root}/sink now holds {rows.num_rows} change rows:")
    print(format_rows(rows))

    server = MonitorServer(metrics.registry)
    _, port = server.start("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop()
    shown = [line for line in text.splitlines() if line.startswith("icetail_rows_emitted_total")]
    print("\nmetrics (`icetail serve` exposes /metrics, /healthz and /readyz on --metrics-port, default 9464):")
    print("\n".join(shown))
    print(f"\nfollow it live:  icetail serve --catalog demo --table {name} --state {state} --sink {sink}")
    print("(catalog `demo` is configured by PYICEBERG_CATALOG__DEMO__URI / __WAREHOUSE; see README)")
    return 0
