"""`icetail serve` following a branch: two consumers of one table, `audit` and `main`, in one process.

The config file gives each `tables:` entry its branch. While the service runs, the audit branch
gets writes that main does not see, then main is fast-forwarded to it (the publish step of
write-audit-publish) and main gets a write of its own. Each sink must end up holding exactly
`read_changes` of its branch (every change once), and the lag metric of each consumer must
measure its own branch's head.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from icetail.monitor.engine.api import read_changes
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ID_NAME,
    NAMESPACE,
    Child,
    Serve,
    Warehouse,
    assert_same_rows,
    free_port,
    id_name_rows,
    sample,
    sink_rows,
    wait_until,
)

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SCHEMA = ID_NAME
TABLE = f"{NAMESPACE}.wap"
STARTUP_SECONDS = 120.0
CATCH_UP_SECONDS = 90.0


def rows(ids: range, tag: str) -> pa.Table:
    return id_name_rows(ids, tag)


def test_serve_delivers_each_branch_to_its_own_sink(tmp_path: Path, spark: Any) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    table = warehouse.create_table("wap", SCHEMA)
    table.append(rows(range(10), "main"))
    table = warehouse.load("wap")
    with table.manage_snapshots() as manage:
        manage.create_branch(table.metadata.current_snapshot_id, "audit")  # type: ignore[arg-type]
    warehouse.load("wap").append(rows(range(100, 105), "audit"), branch="audit")
    config = {
        "catalog": CATALOG_NAME,
        "table": TABLE,
        "state": f"sqlite:///{tmp_path / 'state.db'}",
        "interval": "1s",
        "metrics_host": "127.0.0.1",
        "metrics_port": free_port(),
        "tables": [
            {"consumer": "audit", "branch": "audit", "sink": f"parquet://{tmp_path / 'audit'}"},
            {"consumer": "main", "sink": f"parquet://{tmp_path / 'main'}"},
        ],
    }
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(config))
    serve = Serve(["--config", str(path)], env=child_env(extra=warehouse.env()), cwd=tmp_path, name="serve",
                  port=config["metrics_port"])  # type: ignore[arg-type]  # fmt: skip
    children: list[Child] = [serve]
    try:
        serve.wait_status("/healthz", 200, STARTUP_SECONDS)

        def caught_up(consumer: str, branch: str) -> bool:
            current = warehouse.load("wap")
            head = current.snapshot_by_id(current.metadata.refs[branch].snapshot_id)
            assert head is not None
            labels = {"table": TABLE, "consumer": consumer}
            samples = serve.samples()
            cursor = sample(samples, "icetail_cursor_commit_timestamp_seconds", **labels)
            lag = sample(samples, "icetail_lag_snapshots", **labels)
            return cursor is not None and abs(cursor - head.timestamp_ms / 1000) < 1e-6 and lag == 0

        def both_caught_up() -> bool:
            return caught_up("audit", "audit") and caught_up("main", "main")

        wait_until(both_caught_up, timeout=STARTUP_SECONDS, what="both consumers caught up", child=serve)
        warehouse.load("wap").append(rows(range(105, 110), "audit"), branch="audit")
        warehouse.load("wap").delete("id = 3", branch="audit")
        wait_until(both_caught_up, timeout=CATCH_UP_SECONDS, what="audit's new snapshots delivered", child=serve)
        table = warehouse.load("wap")
        assert sink_rows(tmp_path / "main").num_rows == 10  # main saw none of the audit writes
        with table.manage_snapshots() as manage:  # publish: main fast-forwarded to audit's head
            manage.set_current_snapshot(table.metadata.refs["audit"].snapshot_id)
        warehouse.load("wap").append(rows(range(200, 203), "main"))
        wait_until(both_caught_up, timeout=CATCH_UP_SECONDS, what="the publish delivered on main", child=serve)
        serve.signal(signal.SIGTERM)
        assert serve.wait(60) == 0, serve.diagnostics()
    finally:
        for child in children:
            child.kill_group()
    table = warehouse.load("wap")
    assert_same_rows(sink_rows(tmp_path / "audit"), read_changes(table, branch="audit", spark=spark))
    assert_same_rows(sink_rows(tmp_path / "main"), read_changes(table, spark=spark))
