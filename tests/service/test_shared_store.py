"""A `serve` process holds one checkpoint store connection for all its consumers (shared_stores.py).

A replica following a hundred tables held a hundred PostgreSQL connections, one per consumer's
pipeline, and three replicas of a few hundred tables outgrew the server's default
`max_connections`. An in-process Service (the test's SparkSession) follows four tables into
parquet with a PostgreSQL store; while every consumer is held and caught up, this process's store
sessions in pg_stat_activity are two (the replica registry's and the consumers' shared one), and
none once the service stopped.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from icetail.state.postgres_store import application_name
from tests.support.serve import CATALOG_NAME, ID_NAME, NAMESPACE, Warehouse, id_name_rows, wait_until
from tests.support.stores import PG_URL

TABLES = ("a", "b", "c", "d")


def store_sessions() -> int:
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name(),)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_consumers_of_one_process_share_one_store_connection(
    tmp_path: Path, warehouse: Warehouse, spark: Any, pg_state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.service.config import ServiceConfig
    from icetail.monitor.service.scheduler import Service

    for key, value in warehouse.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())  # pyiceberg reads the env at import
    heads = {}
    for name in TABLES:
        table = warehouse.create_table(name, ID_NAME)
        table.append(id_name_rows(range(3)))
        heads[f"{NAMESPACE}.{name}"] = warehouse.load(name).metadata.current_snapshot_id
    pipelines = tuple(
        PipelineConfig(CATALOG_NAME, f"{NAMESPACE}.{name}", pg_state, f"parquet://{tmp_path / 'sink' / name}")
        for name in TABLES
    )
    service = Service(
        ServiceConfig(pipelines=pipelines, interval_seconds=0.5, metrics_host="127.0.0.1", metrics_port=0),
        spark=spark,
    )
    assert store_sessions() == 0
    runner = threading.Thread(target=service.run, kwargs={"install_signal_handlers": False}, daemon=True)
    runner.start()
    try:

        def all_caught_up() -> bool:
            from icetail.state.store import open_store

            with open_store(pg_state) as store:  # a session of this process too, closed before counting
                loaded = {p.table: store.load(p.consumer_id) for p in pipelines}
            return all(c is not None and c.cursor.snapshot_id == heads[t] for t, c in loaded.items())

        wait_until(all_caught_up, timeout=240, what="every table delivered")
        wait_until(lambda: store_sessions() == 2, timeout=30, what="the probe's own session gone")
        assert store_sessions() == 2  # the registry's and the consumers' one, not one per consumer
    finally:
        service.stop()
        runner.join(60)
    assert not runner.is_alive()
    wait_until(lambda: store_sessions() == 0, timeout=30, what="every store session closed")
