"""A real Prometheus scrapes `icetail serve --verify warn` following a table whose summary lies.

The second append's summary claims one record more than its file holds (tests/support/summaries.py).
The service delivers every row, logs the snapshot, and Prometheus sees the check and mismatch
counters and puts the shipped IcetailSnapshotCheckMismatch alert in pending state.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from tests.service.test_serve_prometheus import EVALUATION_SECONDS, PROMETHEUS, prometheus_config, query
from tests.support.processes import child_env
from tests.support.serve import CATALOG_NAME, NAMESPACE, Child, Serve, Warehouse, free_port, wait_until
from tests.support.summaries import doctor_summary

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

TABLE = f"{NAMESPACE}.orders"
CONSUMER = "orders-tail"
SERIES = f'table="{TABLE}",consumer="{CONSUMER}"'


def test_prometheus_sees_a_summary_mismatch(tmp_path: Path, warehouse: Warehouse, children: list[Child]) -> None:
    if not (os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)):
        pytest.fail(f"no Prometheus server at {PROMETHEUS} (PATH has {shutil.which('prometheus')})")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = warehouse.create_table("orders", schema)
    table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    table.append(pa.table({"id": [3, 4, 5], "v": ["c", "d", "e"]}, schema=schema))
    table = warehouse.load("orders")
    liar = table.metadata.snapshots[-1].snapshot_id
    doctor_summary(table, liar, added_records="4")

    icetail_port, prom_port = free_port(), free_port()
    serve = Serve(
        ["--catalog", CATALOG_NAME, "--table", TABLE, "--consumer", CONSUMER,
         "--state", f"sqlite:///{tmp_path / 'state.db'}", "--sink", f"parquet://{tmp_path / 'sink'}",
         "--verify", "warn", "--interval", "1s", "--metrics-host", "127.0.0.1", "--metrics-port", str(icetail_port)],
        env=child_env(extra=warehouse.env()), cwd=tmp_path, name="serve", port=icetail_port,
    )  # fmt: skip
    children.append(serve)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(icetail_port)))
    prometheus = Child(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        env=child_env(), cwd=tmp_path, name="prometheus",
    )  # fmt: skip
    children.append(prometheus)

    def scraped(metric: str, rule: str, value: float) -> list[dict[str, Any]] | None:
        assert serve.alive(), serve.diagnostics()
        result = query(prom_port, f'{metric}{{{SERIES},rule="{rule}"}}')
        return result if result and float(result[0]["value"][1]) == value else None

    wait_until(
        lambda: scraped("icetail_snapshot_check_mismatches_total", "added-records", 1.0),
        timeout=90, interval=0.5, what="the mismatch scraped", child=prometheus,
    )  # fmt: skip
    assert scraped("icetail_snapshot_checks_total", "added-records", 2.0)
    assert scraped("icetail_snapshot_check_mismatches_total", "total-records", 0.0)  # its total is honest

    def delivered() -> list[dict[str, Any]] | None:  # counted when the batch ends, after its checks
        rows = query(prom_port, f"sum(icetail_rows_emitted_total{{{SERIES}}})")
        return rows if rows and float(rows[0]["value"][1]) == 5.0 else None

    # the batch ends and is scraped: an event, no time promised (a guard against a hang, issue 47)
    wait_until(
        delivered, timeout=EVALUATION_SECONDS, interval=0.5, what="warn delivers every row read", child=prometheus
    )

    def alert_pending() -> list[dict[str, Any]] | None:
        return query(prom_port, 'ALERTS{alertname="IcetailSnapshotCheckMismatch"}') or None

    (alert,) = wait_until(
        alert_pending, timeout=EVALUATION_SECONDS, interval=0.5, what="the alert evaluated", child=prometheus
    )
    assert alert["metric"]["rule"] == "added-records" and alert["metric"]["consumer"] == CONSUMER
    (event,) = [e for e in serve.events() if e.get("logger") == "icetail.verify"]
    assert (event["snapshot_id"], event["rule"], event["expected"], event["found"]) == (liar, "added-records", 4, 3)
    assert event["consumer"] == CONSUMER and event["level"] == "warning"
