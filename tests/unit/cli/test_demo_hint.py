"""The demo's closing hint works pasted into a new shell (issue 25: it named a catalog that lived only in
the demo's own environment, and left out the demo's --identifier-columns), and its `serve` listens on
this machine only (issue 48: it listened on every interface)."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import child_env, run_icetail
from tests.support.serve import Child, free_port, http_get, wait_until

pytestmark = [
    pytest.mark.once,  # line-independent and long: the Spark 4 line only (tests/conftest.py)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the listening sockets from /proc/net"),
]
LOOPBACK = "--metrics-host 127.0.0.1"


def test_the_follow_hint_runs_in_a_new_shell(tmp_path: Path) -> None:
    demo = run_icetail(["demo", "--dir", str(tmp_path / "demo")], child_env(spark_dir=tmp_path / "spark"), timeout=600)
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout.splitlines()
    hint = out[out.index("follow it live, from any shell (catalog `demo` lives in these variables):") + 1 :]
    assert [line.split("=", 1)[0] for line in hint[:-1]] == [
        "  export PYICEBERG_CATALOG__DEMO__URI",
        "  export PYICEBERG_CATALOG__DEMO__WAREHOUSE",
    ]
    command = hint[-1]
    assert " serve --catalog demo --table shop.orders " in command and command.endswith(
        "--identifier-columns order_id"
    ), command
    assert f" {LOOPBACK} " in command, command
    # A new shell: nothing of the demo's environment, no venv on PATH. `run --once` stands in for
    # `serve`, which takes the same arguments (but --metrics-host) and would not stop; the consumer is caught up.
    run_once = command.replace(" serve ", " run ", 1).replace(f" {LOOPBACK}", "") + " --once"
    pasted = "\n".join([*hint[:-1], run_once])
    harness = child_env(spark_dir=tmp_path / "spark")  # this checkout's code and the fast JVM options only
    shell_env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        **{k: harness[k] for k in ("PYTHONPATH", "JDK_JAVA_OPTIONS", "SPARK_LOCAL_DIRS")},
    }
    if os.environ.get("JAVA_HOME"):
        shell_env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    done = subprocess.run(
        ["/bin/sh", "-c", pasted], env=shell_env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "consumer demo.shop.orders: caught up, nothing to deliver" in done.stderr, done.stderr

    # the pasted `serve` itself (on a free port: 9464 may be taken here) listens on loopback only
    port = free_port()
    serve = Child(
        ["/bin/sh", "-c", "\n".join([*hint[:-1], f"exec {command} --metrics-port {port}"])],
        env=shell_env,
        cwd=tmp_path,
        name="pasted-serve",
    )
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/healthz"), timeout=120, what="/healthz", child=serve)
        assert _listeners(port) == {"127.0.0.1"}, serve.diagnostics()
    finally:
        serve.signal(signal.SIGTERM)
        serve.wait(60)
        serve.kill_group()


def _listeners(port: int) -> set[str]:
    """The addresses sockets listen on at `port`, from Linux's /proc/net/tcp and tcp6 tables."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
                    found.add(str(ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))))
    return found
