"""`icetail serve` following a namespace by pattern (issue 35): a real Service in process (real Spark,
a pyiceberg SQL catalog on SQLite, a SQLite checkpoint store) configured by the real loader.

A table created after the start is found at a later poll and delivered into the sink its template
names; a table the exclude matches is never followed; a matched table that is dropped stops its
consumer as a dropped table's always stopped: parked, the reason recorded for `icetail status`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from prometheus_client import CollectorRegistry

from icetail.monitor.cli.main import build_parser
from icetail.monitor.service.config import build_service_config
from icetail.monitor.service.scheduler import Service
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, catalogs_in_process, new_catalog
from tests.support.serve import free_port, wait_until

ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def ids_in(path: Path) -> list[int]:
    if not path.exists():
        return []
    return sorted(json.loads(line)["id"] for line in path.read_text().splitlines() if line)


@pytest.fixture
def source(tmp_path: Path) -> LocalCatalog:
    cat = new_catalog(tmp_path / "src", "patsrc")
    cat.catalog().create_namespace("sales")
    return cat


@pytest.fixture
def serving(tmp_path: Path, source: LocalCatalog, spark: Any) -> Iterator[Service]:
    config_path = tmp_path / "icetail.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "catalog": source.name,
                "state": f"sqlite:///{tmp_path / 'state.db'}",
                "interval": "0.5s",
                "max_failures": 1,
                "metrics_host": "127.0.0.1",
                "metrics_port": free_port(),
                "tables": [
                    {
                        "namespace": "sales",
                        "include": "orders_*",
                        "exclude": ["orders_tmp_*"],
                        "sink": f"jsonl://{tmp_path}/out/{{table}}.jsonl",
                        "consumer": "sales-{table}",
                    }
                ],
            }
        )
    )
    config = build_service_config(build_parser().parse_args(["serve", "--config", str(config_path)]), environ={})
    with catalogs_in_process(source):
        service = Service(config, registry=CollectorRegistry(), spark=spark)
        runner = threading.Thread(target=lambda: service.run(install_signal_handlers=False), daemon=True)
        runner.start()
        try:
            yield service
        finally:
            service.stop()
            runner.join(60)


def test_tables_created_later_are_followed_excluded_ones_not_and_a_dropped_one_stops(
    tmp_path: Path, source: LocalCatalog, serving: Service
) -> None:
    catalog, out, state = source.catalog(), tmp_path / "out", f"sqlite:///{tmp_path / 'state.db'}"
    catalog.create_table("sales.orders_eu", ROWS).append(pa.table({"id": [1, 2]}, schema=ROWS))
    # the namespace was empty when the service started: every table below is found by a later poll
    wait_until(lambda: ids_in(out / "orders_eu.jsonl") == [1, 2] or None, timeout=180, what="orders_eu delivered")
    catalog.create_table("sales.orders_tmp_1", ROWS).append(pa.table({"id": [9]}, schema=ROWS))
    catalog.create_table("sales.returns", ROWS).append(pa.table({"id": [8]}, schema=ROWS))
    catalog.create_table("sales.orders_us", ROWS).append(pa.table({"id": [3]}, schema=ROWS))
    wait_until(lambda: ids_in(out / "orders_us.jsonl") == [3] or None, timeout=120, what="orders_us delivered")
    source.load("sales.orders_eu").append(pa.table({"id": [4]}, schema=ROWS))
    wait_until(lambda: ids_in(out / "orders_eu.jsonl") == [1, 2, 4] or None, timeout=120, what="the next commit")
    with open_store(state) as store:
        followed = sorted(c.consumer for c in store.list_consumers())
    assert followed == ["sales-orders_eu", "sales-orders_us"]  # the poll that found orders_us saw the others
    assert sorted(p.name for p in out.iterdir()) == ["orders_eu.jsonl", "orders_us.jsonl"]

    catalog.drop_table("sales.orders_us")

    def stopped() -> str | None:
        with open_store(state) as store:
            reasons = [s.reason for s in store.stopped_consumers() if s.consumer == "sales-orders_us"]
        return reasons[0] if reasons else None

    reason = wait_until(stopped, timeout=120, what="the dropped table's consumer stopped")
    assert "does not exist" in reason, reason
    ready, why = serving.readiness()
    assert not ready and "sales-orders_us: stopped" in why, why
    source.load("sales.orders_eu").append(pa.table({"id": [5]}, schema=ROWS))  # the others keep delivering
    wait_until(lambda: ids_in(out / "orders_eu.jsonl") == [1, 2, 4, 5] or None, timeout=120, what="eu after the drop")
