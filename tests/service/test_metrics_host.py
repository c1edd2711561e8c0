"""Where `serve`'s endpoint listens: every interface by default, loopback when asked (issue 33).

The README and `serve --help` say so; the endpoint is reached from outside the process, on
loopback and on the machine's own address.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.processes import child_env, run_icetail
from tests.support.serve import (
    CATALOG_NAME,
    NAMESPACE,
    Child,
    Serve,
    Warehouse,
    free_port,
    http_get,
    wait_until,
)


def own_address() -> str:
    """The address this machine sends from (no packet is sent): not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup only
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        pytest.fail(f"this machine has no address but loopback ({address}): the test needs one")
    return address


def serve(tmp_path: Path, warehouse: Warehouse, children: list[Child], name: str, *host: str) -> Serve:
    port = free_port()
    args = [
        "--catalog", CATALOG_NAME, "--table", f"{NAMESPACE}.t", "--state", f"sqlite:///{tmp_path / name}.db",
        "--sink", f"parquet://{tmp_path / name}", "--interval", "1s", "--metrics-port", str(port), *host,
    ]  # fmt: skip
    child = Serve(args, env=child_env(extra=warehouse.env()), cwd=tmp_path, name=name, port=port)
    children.append(child)
    child.wait_status("/healthz", 200, timeout=60)
    return child


def listening_on(child: Serve) -> str:
    """The host of the endpoint's "serving /metrics, /healthz, /readyz on HOST:PORT" log line."""
    line = next(e["msg"] for e in child.events() if str(e.get("msg", "")).startswith("serving /metrics"))
    return str(line.rsplit(" ", 1)[1].rsplit(":", 1)[0])


def test_the_help_says_where_serve_listens() -> None:
    done = run_icetail(["serve", "--help"], child_env())
    assert done.returncode == 0, done.stderr
    assert "default 0.0.0.0, every interface; 127.0.0.1: this machine only" in " ".join(done.stdout.split())


def test_serve_listens_on_every_interface_unless_told_loopback(
    tmp_path: Path, warehouse: Warehouse, children: list[Child]
) -> None:
    warehouse.create_table("t", pa.schema([pa.field("id", pa.int64())]))
    outside = own_address()

    everywhere = serve(tmp_path, warehouse, children, "default")
    assert listening_on(everywhere) == "0.0.0.0"
    assert http_get(f"http://{outside}:{everywhere.port}/healthz") == (200, "ok\n")

    loopback = serve(tmp_path, warehouse, children, "loopback", "--metrics-host", "127.0.0.1")
    assert listening_on(loopback) == "127.0.0.1"
    assert http_get(f"http://{outside}:{loopback.port}/healthz") is None  # refused from outside

    for child in (everywhere, loopback):
        child.signal(signal.SIGTERM)
        wait_until(lambda c=child: not c.alive(), timeout=60, what=f"{child.name} to stop", interval=0.2)
