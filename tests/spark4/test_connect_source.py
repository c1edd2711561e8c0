"""The data source through a real Spark Connect server (pip's pyspark 4), registered by a Connect client.

The server is `spark-submit --class ...SparkConnectServer` on 127.0.0.1 and a free port; its
Python workers run this interpreter (PYSPARK_PYTHON). The catalog is configured the ordinary way,
as PYICEBERG_CATALOG__* variables of the server: the client passes only catalog and table names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import icetail
from tests.spark4.support import row_counter
from tests.support.connect_server import connect_server as start_connect_server
from tests.support.source_table import SourceTable, new_source_table


@pytest.fixture
def connect_table(tmp_path: Path) -> SourceTable:
    table = new_source_table(tmp_path / "src", name="connectcat")
    for action in ("append", "append", "delete", "upsert", "evolve", "append"):
        table.commit(action)
    return table


@pytest.fixture
def connect_server(tmp_path: Path, connect_table: SourceTable) -> Iterator[str]:
    pytest.importorskip("grpc", reason="the Spark Connect client needs icetail[connect] (make installs it)")
    catalog_env = {f"PYICEBERG_CATALOG__CONNECTCAT__{k.upper()}": v for k, v in connect_table.properties.items()}
    with start_connect_server(tmp_path / "connect", env=catalog_env) as server:
        yield server.url


def test_batch_range_through_spark_connect(connect_server: str, connect_table: SourceTable, spark: Any) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from icetail.spark import ChangesDataSource

    client = ConnectSession.builder.remote(connect_server).create()
    try:
        client.dataSource.register(ChangesDataSource)
        ids = connect_table.snapshot_ids
        frame = (
            client.read.format("icetail")
            .option("catalog", "connectcat")
            .option("table", "ns.t")
            .option("from-snapshot", str(ids[1]))
            .option("to-snapshot", str(ids[-1]))
            .load()
        )
        got = frame.toArrow()
    finally:
        client.stop()
    expected = icetail.read_changes(connect_table.load(), ids[1], ids[-1], spark=spark)
    assert got.column_names == expected.column_names
    assert got.num_rows == expected.num_rows > 0
    assert row_counter(got) == row_counter(expected)
