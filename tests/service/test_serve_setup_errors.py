"""`serve` stops at once on a setup error of the sink's database instead of retrying it (issue 33.6).

A database that does not exist used to be a transient SinkError: `serve` retried it cycle after
cycle (--max-failures of them, with backoff) and exited 1. It is a SinkSetupError now: with one
table the process exits 2 after the first failed cycle with the one-line reason; with several,
that consumer is stopped after its first failure, naming the reason, while the others deliver.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icetail.state.store import open_store
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ID_NAME,
    NAMESPACE,
    Serve,
    Warehouse,
    free_port,
    id_name_rows,
    parse_samples,
    sample,
    wait_until,
)
from tests.support.stores import PG_URL, pg_unavailable

pytestmark = pytest.mark.once  # line-independent (tests/conftest.py: ONCE_ON_SPARK35)

HOST = PG_URL.removeprefix("postgresql://").split("@", 1)[1].split("/", 1)[0]
NO_DB_SINK = f"postgresql://postgres@{HOST}/icetail_no_such_db?table=s.t"
MISSING = 'database "icetail_no_such_db" does not exist'


@pytest.fixture(autouse=True)
def _postgres() -> None:
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)


def _failed_cycles(serve: Serve, consumer: str) -> int:
    return sum(1 for e in serve.events() if e.get("msg") == "cycle failed" and e.get("consumer") == consumer)


def test_one_table_whose_sink_database_does_not_exist_exits_2_after_one_cycle(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    warehouse.create_table("t", ID_NAME).append(id_name_rows(range(3)))
    port = free_port()
    args = ["--catalog", CATALOG_NAME, "--table", f"{NAMESPACE}.t", "--state", f"sqlite:///{tmp_path / 's.db'}"]
    args += ["--sink", NO_DB_SINK, "--identifier-columns", "id", "--interval", "1s", "--max-failures", "5"]
    args += ["--metrics-host", "127.0.0.1", "--metrics-port", str(port)]
    serve = Serve(args, env=child_env(extra=warehouse.env()), cwd=tmp_path, name="serve", port=port)
    try:
        status = serve.wait(120)
    finally:
        serve.kill_group()
    lines = serve.stderr().splitlines()
    assert status == 2, serve.diagnostics()
    assert lines[-1].startswith("icetail: error: ") and MISSING in lines[-1], serve.diagnostics()
    assert _failed_cycles(serve, f"{CATALOG_NAME}.{NAMESPACE}.t") == 1, serve.diagnostics()
    assert not (tmp_path / "s.db").exists()  # a refused first cycle creates no store


def test_of_several_tables_the_one_whose_sink_database_does_not_exist_stops_at_once(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    for name in ("good", "bad"):
        warehouse.create_table(name, ID_NAME).append(id_name_rows(range(3)))
    port = free_port()
    state = f"sqlite:///{tmp_path / 'state.db'}"
    config = {
        "catalog": CATALOG_NAME,
        "state": state,
        "interval": "1s",
        "max_failures": 5,
        "metrics_host": "127.0.0.1",
        "metrics_port": port,
        "identifier_columns": "id",
        "tables": [
            {"table": f"{NAMESPACE}.good", "consumer": "good", "sink": f"parquet://{tmp_path / 'good'}"},
            {"table": f"{NAMESPACE}.bad", "consumer": "bad", "sink": NO_DB_SINK},
        ],
    }
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(config))
    serve = Serve(["--config", str(path)], env=child_env(extra=warehouse.env()), cwd=tmp_path, name="serve", port=port)
    try:

        def stopped() -> float | None:
            reply = serve.get("/metrics")
            if reply is None or reply[0] != 200:
                return None
            return sample(parse_samples(reply[1]), "icetail_consumer_stopped", table=f"{NAMESPACE}.bad", consumer="bad")

        wait_until(lambda: stopped() == 1.0, timeout=120, what="the bad consumer stopped", child=serve)
        reason = serve.wait_status("/readyz", 503, 10)
        assert "bad: stopped after 1 consecutive failures" in reason and MISSING in reason, reason
        assert _failed_cycles(serve, "bad") == 1, serve.diagnostics()
        with open_store(state, create=False) as store:
            (recorded,) = store.stopped_consumers()
        assert recorded.consumer == "bad" and MISSING in recorded.reason
    finally:
        serve.kill_group()
