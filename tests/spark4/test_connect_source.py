"""The data source through a real Spark Connect server (pip's pyspark 4), registered by a Connect client.

The server is `spark-submit --class ...SparkConnectServer` on 127.0.0.1 and a free port; its
Python workers run this interpreter (PYSPARK_PYTHON). The catalog is configured the ordinary way,
as PYICEBERG_CATALOG__* variables of the server: the client passes only catalog and table names.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import icetail
from tests.spark4.conftest import SourceTable, new_source_table
from tests.spark4.support import row_counter

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTUP_LIMIT_S = 180  # a safety net for a broken server; a healthy one answers within seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_submit() -> str:
    found = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    assert found, "spark-submit of this venv's pyspark"
    return found


@pytest.fixture
def connect_table(tmp_path: Path) -> SourceTable:
    table = new_source_table(tmp_path / "src", name="connectcat")
    for action in ("append", "append", "delete", "upsert", "evolve", "append"):
        table.commit(action)
    return table


@pytest.fixture
def connect_server(tmp_path: Path, connect_table: SourceTable) -> Iterator[str]:
    pytest.importorskip("grpc", reason="the Spark Connect client needs icetail[connect] (make installs it)")
    port = _free_port()
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **{f"PYICEBERG_CATALOG__CONNECTCAT__{k.upper()}": v for k, v in connect_table.properties.items()},
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    log = (tmp_path / "connect-server.log").open("w")
    server = subprocess.Popen(
        [
            _spark_submit(),
            "--class",
            SERVER_CLASS,
            "--master",
            "local[2]",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.session.timeZone=UTC",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_listening(server, port, tmp_path / "connect-server.log")
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
        log.close()


def _wait_listening(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the gRPC port accepts a connection (the server is up) or the server exits."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"Spark Connect server exited: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"Spark Connect server did not listen on {port}: {log.read_text()[-2000:]}")


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
