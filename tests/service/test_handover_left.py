"""`icetail_handovers_total{cause="left"}` (issue 35 s2): a replica that stops releases each consumer it
holds on its way out and counts it, as `left`, on its own registry (the others never see it leave a
consumer: they claim a free one). A real Service in process (real Spark, a pyiceberg SQL catalog on
SQLite, a SQLite store) holds two consumers of its three, another replica (registered in the store,
holding the third's lease) keeps the third; stop() releases the two and counts exactly them."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
from prometheus_client import CollectorRegistry

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.scheduler import Service
from icetail.state.checkpoint import Cursor, Lease
from icetail.state.replicas import ReplicaId, ReplicaRegistry, group_key
from icetail.state.store import open_store
from tests.support.catalogs import catalogs_in_process, new_catalog
from tests.support.serve import free_port, wait_until

ROWS = pa.schema([pa.field("id", pa.int64(), nullable=False)])
TABLES = ("a", "b", "c")


def handovers(registry: CollectorRegistry, consumer: str, cause: str) -> float:
    labels = {"table": f"ns.{consumer}", "consumer": consumer, "cause": cause}
    return registry.get_sample_value("icetail_handovers_total", labels) or 0.0


def test_a_replica_that_stops_counts_each_consumer_it_released_as_left(tmp_path: Path, spark: Any) -> None:
    cat = new_catalog(tmp_path / "src", "leftsrc")
    cat.catalog().create_namespace("ns")
    for name in TABLES:
        cat.catalog().create_table(f"ns.{name}", ROWS).append(pa.table({"id": [1]}, schema=ROWS))
    state = f"sqlite:///{tmp_path / 'state.db'}"
    pipelines = tuple(
        PipelineConfig(cat.name, f"ns.{name}", state, f"parquet://{tmp_path / 'sink'}", consumer=name)
        for name in TABLES
    )
    # another live replica of the configuration holds c: this one claims a and b, its share of two
    peer = ReplicaId(ReplicaId.of_this_process().host, os.getppid(), "9ee79ee7")  # a live process of this host
    with open_store(state) as store:
        ReplicaRegistry(store).heartbeat(peer, group_key(TABLES), 600)
        store.ensure_consumer("c", cat.name, "ns.c", Cursor.before_first_snapshot())
        store.acquire_lease("c", peer.name, 600)
    port = free_port()
    config = ServiceConfig(pipelines=pipelines, interval_seconds=0.5, metrics_host="127.0.0.1", metrics_port=port)
    registry = CollectorRegistry()
    with catalogs_in_process(cat):
        service = Service(config, registry=registry, spark=spark)
        runner = threading.Thread(target=lambda: service.run(install_signal_handlers=False), daemon=True)
        runner.start()
        try:

            def delivered() -> bool:
                with open_store(state) as store:
                    return all((cp := store.load(n)) is not None and cp.cursor.snapshot_id for n in ("a", "b"))

            wait_until(delivered, timeout=180, what="a and b delivered")
            assert [handovers(registry, n, "left") for n in TABLES] == [0, 0, 0]
        finally:
            service.stop()
            runner.join(60)
    assert not runner.is_alive()
    assert [handovers(registry, n, "left") for n in TABLES] == [1, 1, 0]  # c was never this replica's
    assert sum(handovers(registry, n, cause) for n in TABLES for cause in ("joined", "expired", "stopped")) == 0
    with open_store(state) as store:
        leases = {n: (cp.lease if (cp := store.load(n)) is not None else None) for n in TABLES}
    assert leases["a"] is None and leases["b"] is None, leases  # released, for the others to claim at once
    assert isinstance(leases["c"], Lease) and leases["c"].owner == peer.name
