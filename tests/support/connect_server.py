"""A real Spark Connect server on 127.0.0.1, started from the running pyspark (4.x) for tests.

pip's pyspark 4 ships the server (`spark-connect_2.13` jar) and starts it offline in seconds.
Its Python workers run this interpreter, so they import the icetail installed in this venv.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


@dataclass(frozen=True)
class ConnectServer:
    url: str  # sc://127.0.0.1:PORT
    log: Path

    def tasks_finished(self) -> int:
        """Spark tasks the server has run so far (its log), to prove work ran there and not locally."""
        text = self.log.read_text(errors="replace")
        return sum(1 for line in text.splitlines() if "INFO Executor: Finished task" in line)


@contextmanager
def connect_server(
    workdir: Path, *, env: Mapping[str, str] | None = None, timeout: float = 180
) -> Iterator[ConnectServer]:
    """Yields the running server (`env`: extra variables, e.g. PYICEBERG_* for catalogs it opens)."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    server_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_REMOTE", "PYSPARK_GATEWAY"))}
    server_env.update(
        PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(workdir / "scratch")
    )
    server_env.update(env or {})
    log = workdir / "connect-server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                _spark_submit(),
                "--master", "local[2]",
                "--class", SERVER_CLASS,
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.session.timeZone=UTC",
            ],
            env=server_env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for_listener(server, port, log, timeout)
        yield ConnectServer(f"sc://127.0.0.1:{port}", log)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_for_listener(server: subprocess.Popen[bytes], port: int, log: Path, timeout: float) -> None:
    """Until the gRPC port accepts a connection (the server binds it once it is ready)."""
    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not listen within {timeout}s") from None
            time.sleep(0.2)
