"""Every query of the Grafana dashboard and every alert expression, run by a real Prometheus
against a real `icetail serve` that has delivered.

Prometheus runs with deploy/prometheus/prometheus.yml as shipped except for the target (a free
port), 1s intervals and the path of alerts.yml; it scrapes the path the Deployment's annotation
names. Each dashboard query (Grafana's variables replaced as Grafana would with "All") must
parse and return at least one series for the consumer: a panel on a metric icetail does not
export returns none and fails. Alert expressions are conditions that do not hold for a healthy
consumer, so each metric selector in them must return series, and each rule must evaluate
healthy. The Deployment's probe paths are asked of the same `serve`.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from tests.deploy.test_manifests import DASHBOARD, container, k8s_objects
from tests.support.processes import child_env
from tests.support.serve import CATALOG_NAME, NAMESPACE, Child, Serve, Warehouse, free_port, http_get, wait_until

pytestmark = pytest.mark.once  # one serve and one Prometheus, the same on both Spark lines

PROMETHEUS = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
PROM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
TABLE = f"{NAMESPACE}.orders"
CONSUMER = "orders-tail"
STARTUP_SECONDS = 120.0
# Grafana's $__rate_interval is at least four scrape intervals; a minute holds every sample here
RATE_INTERVAL = "1m"


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every panel, rows' nested panels included, and the variables' queries."""
    board = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            out.extend((panel["title"], t["expr"]) for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(board["panels"])
    return out


def label_value_queries() -> list[tuple[str, str, str]]:
    """(variable, label, series selector) of each `label_values(selector, label)` variable."""
    board = json.loads(DASHBOARD.read_text())
    out = []
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
            assert match, f"variable {var['name']}: {query!r} is not label_values(selector, label)"
            out.append((var["name"], match.group(2), match.group(1)))
    return out


def as_grafana_sends(expr: str) -> str:
    """The query with the variables at "All" (their allValue `.*`) and $__rate_interval set."""
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$table", ".*").replace("$consumer", ".*")


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def selectors(expr: str) -> list[str]:
    """The metric selectors of an expression: `name{...}` or a bare metric name."""
    return [m.group(0) for m in re.finditer(r"\b(?:icetail_\w+|up)(?:\{[^}]*\})?", expr)]


class Prometheus:
    def __init__(self, port: int) -> None:
        self.port = port

    def query(self, promql: str) -> list[dict[str, Any]] | None:
        """The result of an instant query; None while Prometheus is not answering yet."""
        reply = http_get(f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if reply is None or reply[0] == 503:
            return None
        status, body = reply
        payload = json.loads(body)
        assert status == 200 and payload["status"] == "success", f"{promql!r} was refused: {body}"
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def get(self, path: str, **params: str) -> Any:
        reply = http_get(f"http://127.0.0.1:{self.port}{path}?" + urllib.parse.urlencode(params))
        assert reply is not None and reply[0] == 200, reply
        return json.loads(reply[1])["data"]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill_group()


def test_every_dashboard_query_and_alert_returns_series_from_a_real_serve(
    tmp_path: Path, children: list[Child]
) -> None:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"no Prometheus server at {PROMETHEUS}; apt-get install prometheus (make system-deps)")
    warehouse = Warehouse(tmp_path / "iceberg")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("item", pa.string())])
    table = warehouse.create_table("orders", schema)
    table.append(pa.table({"id": [1, 2, 3], "item": ["a", "b", "c"]}, schema=schema))

    deployment = container(k8s_objects()[("Deployment", "icetail")])
    annotations = k8s_objects()[("Deployment", "icetail")]["spec"]["template"]["metadata"]["annotations"]
    icetail_port, prom_port = free_port(), free_port()
    serve = Serve(
        ["--catalog", CATALOG_NAME, "--table", TABLE, "--consumer", CONSUMER]
        + ["--state", f"sqlite:///{tmp_path / 'state.db'}", "--sink", f"parquet://{tmp_path / 'sink'}"]
        + ["--interval", "1s", "--metrics-host", "127.0.0.1", "--metrics-port", str(icetail_port)],
        env=child_env(extra=warehouse.env()),
        cwd=tmp_path,
        name="serve",
        port=icetail_port,
    )
    children.append(serve)

    config: dict[str, Any] = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROM_DIR / name) for name in config["rule_files"]]
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == annotations["prometheus.io/path"]
    job["static_configs"][0]["targets"] = [f"127.0.0.1:{icetail_port}"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = Child(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        + [f"--web.listen-address=127.0.0.1:{prom_port}"],
        env=child_env(),
        cwd=tmp_path,
        name="prometheus",
    )
    children.append(prometheus)
    prom = Prometheus(prom_port)

    # the Deployment's probes, asked of serve: ready once the first batch is delivered
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        serve.wait_status(deployment[probe]["httpGet"]["path"], 200, STARTUP_SECONDS)

    # a second commit after the first delivery, so that rates and histograms move between scrapes
    def delivered(rows: float) -> Any:
        assert serve.alive(), serve.diagnostics()
        result = prom.query(f'sum(icetail_rows_emitted_total{{consumer="{CONSUMER}",change_type="INSERT"}})')
        return result if result and float(result[0]["value"][1]) >= rows else None

    wait_until(lambda: delivered(3), timeout=STARTUP_SECONDS, interval=0.5, what="3 rows scraped", child=prometheus)
    table = warehouse.load("orders")
    table.append(pa.table({"id": [4, 5], "item": ["d", "e"]}, schema=schema))
    wait_until(lambda: delivered(5), timeout=60, interval=0.5, what="5 rows scraped", child=prometheus)

    empty = []
    for title, expr in dashboard_targets():
        result = prom.query(as_grafana_sends(expr))
        assert result is not None
        if not result:
            empty.append(f"panel {title!r}: {expr}")
    assert not empty, "dashboard queries without series (a metric icetail does not export?):\n" + "\n".join(empty)
    assert len(dashboard_targets()) >= 15

    rows = prom.query(
        as_grafana_sends('sum by (change_type) (rate(icetail_rows_emitted_total{job="icetail"}[$__rate_interval]))')
    )
    assert rows and any(r["metric"]["change_type"] == "INSERT" and float(r["value"][1]) > 0 for r in rows)

    for variable, label, selector in label_value_queries():
        values = prom.get(f"/api/v1/label/{label}/values", **{"match[]": as_grafana_sends(selector)})
        expected = {"table": TABLE, "consumer": CONSUMER}[label]
        assert expected in values, f"variable ${variable} offers {values}, not {expected}"

    for rule in alert_rules():
        assert prom.query(rule["expr"]) is not None  # parses and evaluates
        found = selectors(rule["expr"])
        assert found, rule["alert"]
        for selector in found:
            assert prom.query(selector), f"alert {rule['alert']}: {selector} returns no series"

    def rules_evaluated() -> list[dict[str, Any]] | None:
        groups = prom.get("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules) else None

    rules = wait_until(rules_evaluated, timeout=30, interval=0.5, what="alert rules evaluated", child=prometheus)
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    assert prom.query('ALERTS{alertstate="firing"}') == []
