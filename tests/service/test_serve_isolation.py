"""One broken table of several stops only its own consumer (issue 24, "many tables in one service").

`icetail serve` follows two tables; one of them loses a data file (deleted outside Iceberg), so
every cycle of its consumer fails. After `max_failures` failures that consumer is stopped: the
process keeps running, the other table keeps delivering new snapshots, `/readyz` names the stopped
consumer and its error, and `icetail_consumer_stopped` is 1 for it and 0 for the other.
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
    Serve,
    Warehouse,
    assert_same_rows,
    free_port,
    id_name_rows,
    parse_samples,
    sample,
    sink_rows,
    wait_until,
)

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SCHEMA = ID_NAME
STARTUP_SECONDS = 120.0


def rows(ids: range) -> pa.Table:
    return id_name_rows(ids, "n")


def test_a_failing_table_stops_only_its_consumer(tmp_path: Path, spark: Any) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    good = warehouse.create_table("good", SCHEMA)
    good.append(rows(range(5)))
    bad = warehouse.create_table("bad", SCHEMA)
    bad.append(rows(range(3)))
    lost = next(iter(warehouse.load("bad").scan().plan_files())).file.file_path
    Path(lost.removeprefix("file://")).unlink()  # deleted outside Iceberg: every read of it fails
    port = free_port()
    config = {
        "catalog": CATALOG_NAME,
        "state": f"sqlite:///{tmp_path / 'state.db'}",
        "interval": "1s",
        "max_failures": 2,
        "metrics_host": "127.0.0.1",
        "metrics_port": port,
        "tables": [
            {"table": f"{NAMESPACE}.good", "consumer": "good", "sink": f"parquet://{tmp_path / 'good'}"},
            {"table": f"{NAMESPACE}.bad", "consumer": "bad", "sink": f"parquet://{tmp_path / 'bad'}"},
        ],
    }
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(config))
    serve = Serve(["--config", str(path)], env=child_env(extra=warehouse.env()), cwd=tmp_path, name="serve", port=port)
    try:

        def stopped(consumer: str, table: str) -> float | None:
            reply = serve.get("/metrics")
            if reply is None or reply[0] != 200:
                return None
            return sample(parse_samples(reply[1]), "icetail_consumer_stopped", table=table, consumer=consumer)

        wait_until(
            lambda: stopped("bad", f"{NAMESPACE}.bad") == 1.0,
            timeout=STARTUP_SECONDS,
            what="the broken table's consumer stopped",
            child=serve,
        )
        assert stopped("good", f"{NAMESPACE}.good") == 0.0
        reason = serve.wait_status("/readyz", 503, 10)
        assert "bad: stopped after 2 consecutive failures" in reason and Path(lost).name in reason, reason
        assert "good" not in reason.replace("bad", ""), reason  # the healthy consumer is not named

        warehouse.load("good").append(rows(range(100, 104)))  # the healthy table still delivers
        head = warehouse.load("good").metadata.current_snapshot_id

        def good_caught_up() -> bool:
            samples = serve.samples()
            labels = {"table": f"{NAMESPACE}.good", "consumer": "good"}
            caught_up = sample(samples, "icetail_lag_snapshots", **labels) == 0
            return caught_up and sink_rows(tmp_path / "good").num_rows == 9

        wait_until(good_caught_up, timeout=90, what="the healthy table's new snapshot delivered", child=serve)
        assert serve.alive()
        assert [e for e in serve.events() if e.get("msg", "").startswith("consumer stopped")], serve.diagnostics()
        serve.signal(signal.SIGTERM)
        assert serve.wait(60) == 0, serve.diagnostics()
    finally:
        serve.kill_group()
    table = warehouse.load("good")
    assert table.metadata.current_snapshot_id == head
    assert_same_rows(sink_rows(tmp_path / "good"), read_changes(table, spark=spark))
