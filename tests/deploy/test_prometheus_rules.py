"""deploy/prometheus: the real promtool checks the configs and rules and runs the rule unit tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetail.monitor.service.metrics import Metrics

PROM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
EXPECTED_ALERTS = {
    "IcetailLagHigh",
    "IcetailLagUnknown",
    "IcetailCursorLost",
    "IcetailConsecutiveFailures",
    "IcetailConsumerStopped",
    "IcetailConsumerUnowned",
    "IcetailNoSuccessfulBatch",
    "IcetailDown",
    "IcetailSnapshotCheckMismatch",
}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = os.environ.get("PROMTOOL_BIN") or shutil.which("promtool") or "/usr/bin/promtool"
    if not os.access(path, os.X_OK):
        pytest.fail("promtool is missing; install it with `apt-get install prometheus`")
    return path


def run(promtool: str, *args: str, cwd: Path = PROM_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_check_rules(promtool: str) -> None:
    done = run(promtool, "check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in done.stdout


def test_promtool_check_config(promtool: str) -> None:
    done = run(promtool, "check", "config", str(PROM_DIR / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 1 rule files found" in done.stdout


def test_promtool_check_kubernetes_config(promtool: str, tmp_path: Path) -> None:
    """prometheus-kubernetes.yml as is; on a promtool built without Kubernetes discovery
    (Debian's), with the discovery swapped for a static target so the rest is still checked."""
    source = PROM_DIR / "prometheus-kubernetes.yml"
    done = run(promtool, "check", "config", str(source))
    if done.returncode == 0:
        return
    output = done.stdout + done.stderr
    assert "field kubernetes_sd_configs not found" in output, output
    config = yaml.safe_load(source.read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "icetail"
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    job["static_configs"] = [{"targets": ["10.0.0.1:9464"]}]
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    patched = tmp_path / "prometheus-kubernetes.yml"
    patched.write_text(yaml.safe_dump(config))
    done = run(promtool, "check", "config", str(patched), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules(promtool: str) -> None:
    done = run(promtool, "test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_unit_tested_and_documented() -> None:
    names = {rule["alert"] for rule in rules()}
    assert names == EXPECTED_ALERTS
    tests = yaml.safe_load((PROM_DIR / "alerts_test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    untested_quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert tested == EXPECTED_ALERTS, "each alert has a firing case"
    assert untested_quiet == EXPECTED_ALERTS, "each alert has a not-yet-firing case"
    for rule in rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["for"], f"{rule['alert']} fires on a single evaluation"


def test_alerts_use_metrics_icetail_exports() -> None:
    metrics = Metrics.create()
    metrics.register_consumer("db.t", "c")
    metrics.record_success("db.t", "c")
    metrics.set_cursor_condition("db.t", "c", None)
    exported = {s.name for family in metrics.registry.collect() for s in family.samples}
    used = {name for rule in rules() for name in re.findall(r"\bicetail_\w+", rule["expr"])}
    assert used == {
        "icetail_lag_seconds",
        "icetail_cursor_lost",
        "icetail_consecutive_failures",
        "icetail_consumer_stopped",
        "icetail_consumer_owned",
        "icetail_last_success_timestamp_seconds",
        "icetail_snapshot_check_mismatches_total",
    }
    assert used <= exported
