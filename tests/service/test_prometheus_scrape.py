"""The real Prometheus server scrapes monitor.http_server and can query icetail's metrics."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import BatchReport, Metrics

PROMETHEUS = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
# A guard against a hang, not a time anything promises: the scrape is awaited as an event (a real
# Prometheus starting, then scraping every second, on a busy machine: issue 47)
DEADLINE_SECONDS = 300.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(prom_port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=2) as resp:
        payload = json.load(resp)
    assert payload["status"] == "success", payload
    result: list[dict[str, Any]] = payload["data"]["result"]
    return result


@pytest.fixture
def icetail_endpoint() -> Iterator[tuple[Metrics, int]]:
    metrics = Metrics.create()
    metrics.register_consumer("db.events", "audit")
    metrics.record_batch(
        BatchReport(
            table="db.events",
            consumer="audit",
            from_snapshot_exclusive=None,
            to_snapshot_inclusive=7,
            snapshots=2,
            rows_by_change_type={"INSERT": 5, "DELETE": 1},
            batch_seconds=1.5,
        )
    )
    server = MonitorServer(metrics.registry)
    _, port = server.start("127.0.0.1", 0)
    try:
        yield metrics, port
    finally:
        server.stop()


def test_real_prometheus_scrapes_icetail(tmp_path: Path, icetail_endpoint: tuple[Metrics, int]) -> None:
    if not (os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)):
        found = shutil.which("prometheus")
        pytest.fail(
            f"the Prometheus server binary is missing at {PROMETHEUS}"
            + (f" (one is on PATH at {found}: set PROMETHEUS_BIN)" if found else "")
            + "; install it with `apt-get install prometheus`"
        )
    _, target_port = icetail_endpoint
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: icetail\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    prom_port = _free_port()
    log_path = tmp_path / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            build_info: list[dict[str, Any]] = []
            up: list[dict[str, Any]] = []
            last_error = "no query attempted"
            deadline = time.monotonic() + DEADLINE_SECONDS
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                try:
                    build_info = _query(prom_port, "icetail_build_info")
                    up = _query(prom_port, 'up{job="icetail"}')
                except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                else:
                    if build_info and up and up[0]["value"][1] == "1":
                        break
                    last_error = f"build_info={build_info} up={up}"
                time.sleep(0.25)
            if not (build_info and up and up[0]["value"][1] == "1"):
                proc.terminate()
                proc.wait(10)
                pytest.fail(
                    f"Prometheus did not scrape icetail within {DEADLINE_SECONDS}s "
                    f"(exit code {proc.returncode}; last: {last_error});\n"
                    f"prometheus log:\n{log_path.read_text(errors='replace')[-4000:]}"
                )

            labels = build_info[0]["metric"]
            assert labels["job"] == "icetail"
            assert labels["instance"] == f"127.0.0.1:{target_port}"
            assert {"icetail", "pyspark", "pyiceberg", "pyarrow", "python"} <= set(labels)
            rows = _query(prom_port, 'icetail_rows_emitted_total{table="db.events",consumer="audit"}')
            by_type = {r["metric"]["change_type"]: float(r["value"][1]) for r in rows}
            assert by_type == {"INSERT": 5.0, "DELETE": 1.0, "UPDATE_BEFORE": 0.0, "UPDATE_AFTER": 0.0}
            count = _query(prom_port, "icetail_batch_duration_seconds_count")
            assert [float(r["value"][1]) for r in count] == [1.0]
            # no `<counter>_created` series beside each counter and histogram (issue 33): Prometheus
            # stores them as series of their own, the start time again, read by nothing
            created = _query(prom_port, '{__name__=~".+_created"}')
            assert [r["metric"]["__name__"] for r in created] == []
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
