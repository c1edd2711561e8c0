"""The demo's second half: plan, run the exactly-once pipeline into a parquet sink, show it all."""

from __future__ import annotations

import os
import shlex
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.table import Table

from icetail.monitor.cli.progress import describe
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline
from icetail.monitor.planning.plan_report import format_plan
from icetail.monitor.planning.planner import Planner
from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import Metrics
from icetail.monitor.service.scheduler import batch_report


def run_demo_pipeline(
    root: str, table: Table, format_rows: Callable[[pa.Table], str], catalog_env: Mapping[str, str]
) -> int:
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
    print("\nfollow it live, from any shell (catalog `demo` lives in these variables):")
    print("\n".join(follow_hint(catalog_env, name, state, sink, config.identifier_columns or ())))
    return 0


def follow_hint(
    catalog_env: Mapping[str, str], table: str, state: str, sink: str, identifier_columns: Sequence[str]
) -> list[str]:
    """Lines that work pasted into a new shell: the catalog's variables, then `serve` by absolute path,
    its metrics on this machine only (serve's default, every interface, is for containers and probes)."""
    lines = [f"  export {key}={shlex.quote(value)}" for key, value in sorted(catalog_env.items())]
    args = ["serve", "--catalog", "demo", "--table", table, "--state", state, "--sink", sink]
    args += ["--metrics-host", "127.0.0.1"]
    if identifier_columns:
        args += ["--identifier-columns", ",".join(identifier_columns)]
    lines.append("  " + " ".join(shlex.quote(part) for part in [*icetail_command(), *args]))
    return lines


def icetail_command() -> list[str]:
    """This installation's `icetail`, by absolute path: a new shell may not have its venv on PATH."""
    script = os.path.join(os.path.dirname(sys.executable), "icetail")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "icetail"]
