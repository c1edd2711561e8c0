"""A real Prometheus scrapes a real `icetail serve` with the shipped scrape config and alert rules.

deploy/prometheus/prometheus.yml is used as shipped except for what a test must change: the
target (a free port on 127.0.0.1), 1s intervals, and the absolute path of alerts.yml.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    NAMESPACE,
    Child,
    Serve,
    Warehouse,
    free_port,
    http_get,
    wait_until,
)

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

PROMETHEUS = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
TABLE = f"{NAMESPACE}.clicks"
CONSUMER = "clicks-tail"
SERIES = f'table="{TABLE}",consumer="{CONSUMER}"'
STARTUP_SECONDS = 90.0
# A guard against a hang: Prometheus evaluates the rules every second as configured here, but
# nothing bounds when it gets to on a busy machine; the evaluation is awaited as an event (issue 47)
EVALUATION_SECONDS = 300.0


def prometheus_config(target_port: int) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(DEPLOY / name) for name in config["rule_files"]]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "icetail"
    (static,) = job["static_configs"]
    static["targets"] = [f"127.0.0.1:{target_port}"]
    return config


def query(prom_port: int, promql: str) -> list[dict[str, Any]] | None:
    """The vector result of an instant query; None while Prometheus is not answering yet."""
    reply = http_get(f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if reply is None or reply[0] == 503:  # not listening yet, or the TSDB is still starting
        return None
    status, body = reply
    payload = json.loads(body)
    assert status == 200 and payload["status"] == "success", (promql, body)
    result: list[dict[str, Any]] = payload["data"]["result"]
    return result


def test_real_prometheus_scrapes_icetail_serve(tmp_path: Path, warehouse: Warehouse, children: list[Child]) -> None:
    if not (os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)):
        found = shutil.which("prometheus")
        pytest.fail(f"no Prometheus server at {PROMETHEUS} (PATH has {found}); apt-get install prometheus")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("url", pa.string())])
    table = warehouse.create_table("clicks", schema)
    table.append(pa.table({"id": [1, 2, 3], "url": ["/a", "/b", "/c"]}, schema=schema))
    table = warehouse.load("clicks")
    current = table.metadata.current_snapshot()
    assert current is not None

    icetail_port, prom_port = free_port(), free_port()
    serve = Serve(
        [
            "--catalog",
            CATALOG_NAME,
            "--table",
            TABLE,
            "--consumer",
            CONSUMER,
            "--state",
            f"sqlite:///{tmp_path / 'state.db'}",
            "--sink",
            f"parquet://{tmp_path / 'sink'}",
            "--interval",
            "1s",
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(icetail_port),
        ],
        env=child_env(extra=warehouse.env()),
        cwd=tmp_path,
        name="serve",
        port=icetail_port,
    )
    children.append(serve)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(icetail_port)))
    prometheus = Child(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        env=child_env(),
        cwd=tmp_path,
        name="prometheus",
    )
    children.append(prometheus)

    # Prometheus has scraped icetail after the first batch: the cursor is the current snapshot
    def scraped_caught_up() -> list[dict[str, Any]] | None:
        assert serve.alive(), serve.diagnostics()
        result = query(prom_port, f"icetail_cursor_commit_timestamp_seconds{{{SERIES}}}")
        if result and abs(float(result[0]["value"][1]) - current.timestamp_ms / 1000) < 1e-6:
            return result
        return None

    wait_until(
        scraped_caught_up,
        timeout=STARTUP_SECONDS,
        interval=0.5,
        what="a scrape after the first batch",
        child=prometheus,
    )

    lag = query(prom_port, f"icetail_lag_snapshots{{{SERIES}}}")
    assert lag is not None and len(lag) == 1
    assert lag[0]["metric"]["job"] == "icetail"
    assert lag[0]["metric"]["instance"] == f"127.0.0.1:{icetail_port}"
    assert lag[0]["metric"]["env"] == "local"  # the static label of the shipped config
    assert float(lag[0]["value"][1]) == 0.0

    up = query(prom_port, 'up{job="icetail"}')
    assert up is not None and [(u["metric"]["instance"], u["value"][1]) for u in up] == [
        (f"127.0.0.1:{icetail_port}", "1")
    ]
    rows = query(prom_port, f"sum by (change_type) (icetail_rows_emitted_total{{{SERIES}}})")
    assert rows is not None
    assert {r["metric"]["change_type"]: float(r["value"][1]) for r in rows} == {
        "INSERT": 3.0,
        "DELETE": 0.0,
        "UPDATE_BEFORE": 0.0,
        "UPDATE_AFTER": 0.0,
    }

    # the shipped alert rules are loaded and evaluated against the live series; none fires
    def rules_evaluated() -> list[dict[str, Any]] | None:
        reply = http_get(f"http://127.0.0.1:{prom_port}/api/v1/rules")
        assert reply is not None and reply[0] == 200
        groups: list[dict[str, Any]] = json.loads(reply[1])["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules) else None

    rules = wait_until(
        rules_evaluated, timeout=EVALUATION_SECONDS, interval=0.5, what="alert rules evaluated", child=prometheus
    )
    assert {r["name"] for r in rules} >= {"IcetailLagHigh", "IcetailDown", "IcetailConsecutiveFailures"}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    assert query(prom_port, "ALERTS") == []
