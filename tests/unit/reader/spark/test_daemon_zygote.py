"""The worker daemon forked from a zygote that imported it beside the JVM's start (reader/spark/daemon_zygote.py).

Spark's side of the daemon protocol is played here by a real process: it starts the daemon
module as Spark does (`python -m icetail.reader.spark.daemon`, pipes on stdin and stdout), reads
the port from stdout, and ends the daemon by closing stdin or by SIGTERM, as Spark does.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from icetail.reader.spark.daemon_zygote import SOCKET_ENV, launch, start_zygote, stop_zygotes

pytestmark = pytest.mark.skipif(not hasattr(socket, "send_fds"), reason="needs Unix descriptor passing")


def _wait_gone(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _spark_starts_daemon(path: str | None) -> tuple[subprocess.Popen[bytes], int]:
    """The launcher as Spark runs it; returns it and the port its daemon listens on."""
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s3cret", "SPARK_REUSE_WORKER": "1"}
    env.pop(SOCKET_ENV, None)
    if path is not None:
        env[SOCKET_ENV] = path
    launcher = subprocess.Popen(
        [sys.executable, "-m", "icetail.reader.spark.daemon"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert launcher.stdout is not None
    (port,) = struct.unpack("!i", launcher.stdout.read(4))
    return launcher, port


def _handshake(port: int, secret: str) -> bytes:
    """What a worker the daemon forks answers to Spark's authentication (PySpark's daemon protocol)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        stream = conn.makefile("rwb")
        stream.read(4)  # the worker's pid
        stream.write(struct.pack("!i", len(secret)) + secret.encode())
        stream.flush()
        (size,) = struct.unpack("!i", stream.read(4))
        return bytes(stream.read(size))


def _daemon_pid(port: int) -> int:
    """The process listening on `port`: the daemon itself."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
            inode = fields[9]
    assert inode is not None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if f"socket:[{inode}]" in links:
            return int(pid)
    raise AssertionError(f"no process listens on {port}")


@pytest.fixture
def zygote_path() -> Iterator[str]:
    path = start_zygote(sys.executable, {**os.environ, "PYTHONHASHSEED": "0"})
    assert path is not None
    yield path
    stop_zygotes()
    assert not Path(path).parent.exists()


def test_the_zygote_becomes_the_daemon_and_ends_when_spark_closes_its_stdin(zygote_path: str) -> None:
    launcher, port = _spark_starts_daemon(zygote_path)
    daemon = _daemon_pid(port)
    # the zygote, this driver's child, is the daemon; the launcher Spark started only waits
    assert daemon != launcher.pid and _parent(daemon) == os.getpid()
    assert "daemon_zygote" in Path(f"/proc/{daemon}/cmdline").read_text()
    # it runs in the launcher's environment: its workers check the secret Spark gave the launcher
    assert _handshake(port, "s3cret") == b"ok" and _handshake(port, "wrong") == b"err"
    assert launcher.stdin is not None
    launcher.stdin.close()  # Spark is done with the daemon
    assert _wait_gone(daemon) and launcher.wait(60) is not None
    assert not Path(zygote_path).parent.exists()
    # a zygote serves one daemon: the next launcher runs the daemon itself
    again, port = _spark_starts_daemon(zygote_path)
    assert _daemon_pid(port) == again.pid
    again.send_signal(signal.SIGTERM)  # Spark's destroy() of its daemon process
    assert again.wait(60) is not None


def test_spark_stops_the_daemon_by_sigterm_to_the_launcher(zygote_path: str) -> None:
    launcher, port = _spark_starts_daemon(zygote_path)
    daemon = _daemon_pid(port)
    assert daemon != launcher.pid
    launcher.send_signal(signal.SIGTERM)
    assert _wait_gone(daemon) and launcher.wait(60) is not None


def test_without_a_zygote_the_launcher_runs_the_daemon_itself(tmp_path: Path) -> None:
    assert launch(None) is False and launch("0") is False
    # a zygote that failed removed its folder: no wait for its socket (a folder still there would
    # be a zygote starting, waited for BIND_SECONDS)
    gone = str(tmp_path / "zygote-gone" / "daemon.sock")
    assert launch(gone) is False
    launcher, port = _spark_starts_daemon(gone)
    assert _daemon_pid(port) == launcher.pid  # the old way: the launcher is the daemon
    assert launcher.stdin is not None
    launcher.stdin.close()
    assert launcher.wait(60) is not None  # PySpark's daemon exits 1 on a closed stdin too


def test_the_zygote_ends_with_the_driver(tmp_path: Path) -> None:
    """A driver killed outright leaves no zygote behind (its stdin is a pipe from the driver)."""
    script = (
        "import os, sys, time\n"
        "from icetail.reader.spark.daemon_zygote import start_zygote\n"
        "print(start_zygote(sys.executable, dict(os.environ)), flush=True)\n"
        "time.sleep(600)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert driver.stdout is not None
    path = Path(driver.stdout.readline().strip())
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    zygotes = [p for p in _children(driver.pid) if "daemon_zygote" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(zygotes) == 1
    driver.kill()
    driver.wait(30)
    assert _wait_gone(zygotes[0]) and not path.parent.exists()


def _children(pid: int) -> list[int]:
    out = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            if _parent(int(child)) == pid:
                out.append(int(child))
        except OSError:
            continue
    return out
