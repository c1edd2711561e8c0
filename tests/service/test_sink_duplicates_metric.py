"""`icetail_sink_duplicate_keys_total`: a mirror's duplicate keys reach Prometheus. A real `Service`
(in process, real Spark) follows a pyiceberg table that holds a key twice into a real mirror (the
Iceberg mirror, the Iceberg history, the PostgreSQL mirror), and its /metrics endpoint is scraped."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.config import ServiceConfig
from icetail.monitor.service.scheduler import Service
from tests.support.catalogs import catalogs_in_process, new_catalog
from tests.support.pg_mirror import (
    mirror_url,
    pg_schema,  # noqa: F401  (a fixture)
)
from tests.support.serve import free_port, http_get, wait_until

ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.large_string())])
SERIES = re.compile(r'^icetail_sink_duplicate_keys_total\{consumer="dup",table="ns\.t"\} (\S+)$', re.M)


@pytest.mark.parametrize("sink", ["iceberg-mirror", "iceberg-history", "postgresql-mirror"])
def test_duplicate_keys_applied_by_a_mirror_are_scraped(
    tmp_path: Path, spark: Any, request: pytest.FixtureRequest, sink: str
) -> None:
    cat = new_catalog(tmp_path / "src", "dupsrc")
    cat.catalog().create_namespace("ns")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    cat.catalog().create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=True),
                                              NestedField(2, "v", StringType())))  # fmt: skip
    cat.load("ns.t").append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=ARROW))
    cat.load("ns.t").append(pa.table({"id": [2, 3, 4], "v": ["b2", "c2", "d"]}, schema=ARROW))  # 2 and 3 again
    urls = {
        "iceberg-mirror": f"iceberg://{cat.name}/tgt.m?mode=mirror",
        "iceberg-history": f"iceberg://{cat.name}/tgt.h?mode=history",
    }
    url = urls.get(sink) or mirror_url(request.getfixturevalue("pg_schema"))
    pipeline = PipelineConfig(
        catalog=cat.name,
        table="ns.t",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        sink_url=url,
        consumer="dup",
        identifier_columns=("id",),
    )
    port = free_port()
    config = ServiceConfig(pipelines=(pipeline,), interval_seconds=0.5, metrics_host="127.0.0.1", metrics_port=port)
    with catalogs_in_process(cat):
        service = Service(config, registry=CollectorRegistry(), spark=spark)
        runner = threading.Thread(target=lambda: service.run(install_signal_handlers=False), daemon=True)
        runner.start()
        try:

            def scraped() -> float | None:
                reply = http_get(f"http://127.0.0.1:{port}/metrics")
                found = SERIES.search(reply[1]) if reply is not None and reply[0] == 200 else None
                return float(found.group(1)) if found is not None and float(found.group(1)) > 0 else None

            assert wait_until(scraped, timeout=120, what="a duplicate key counted") == 2.0
        finally:
            service.stop()
            runner.join(60)
