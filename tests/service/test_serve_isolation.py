"""One broken table of several stops only its own consumer (issue 24, "many tables in one service").

`icetail serve` follows two tables; one of them loses a data file (deleted outside Iceberg), so
every cycle of its consumer fails. After `max_failures` failures that consumer is stopped: the
process keeps running, the other table keeps delivering new snapshots, `/readyz` names the stopped
consumer and its error, and `icetail_consumer_stopped` is 1 for it and 0 for the other. The stop
is recorded in the checkpoint store, so `icetail status` (another process) names it and why; a stop
an earlier process recorded for the healthy consumer is cleared by its first delivery.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from icetail.monitor.engine.api import read_changes
from icetail.state.store import open_store
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ICETAIL,
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
    state = f"sqlite:///{tmp_path / 'state.db'}"
    with open_store(state) as store:  # an earlier serve stopped "good": this one's first delivery clears it
        store.record_stopped("good", CATALOG_NAME, f"{NAMESPACE}.good", "an earlier failure, since fixed")
    config = {
        "catalog": CATALOG_NAME,
        "state": state,
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

        def recorded_stops() -> list[str]:
            with open_store(state, create=False) as store:
                return [s.consumer for s in store.stopped_consumers()]

        # "good" delivered (readyz does not name it), so its old stop is gone; "bad"'s follows its metric
        wait_until(lambda: recorded_stops() == ["bad"], timeout=30, what="the stop recorded", child=serve)
        with open_store(state, create=False) as store:
            (recorded,) = store.stopped_consumers()
        assert (recorded.consumer, recorded.table) == ("bad", f"{NAMESPACE}.bad")
        assert Path(lost).name in recorded.reason and "\n" not in recorded.reason, recorded
        env = child_env(extra=warehouse.env())
        shown = subprocess.run([ICETAIL, "status", "--state", state, "--json"], capture_output=True, text=True,
                               env=env, cwd=tmp_path, timeout=120, check=True)  # fmt: skip
        reports = {r["consumer"]: r for r in json.loads(shown.stdout)}
        assert reports["bad"]["stopped"]["reason"] == recorded.reason and reports["good"]["stopped"] is None
        text = subprocess.run([ICETAIL, "status", "--state", state], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120, check=True).stdout  # fmt: skip
        (bad_line,) = [line for line in text.splitlines() if line.startswith("bad:")]
        assert "STOPPED by serve since" in bad_line and Path(lost).name in bad_line, text

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
