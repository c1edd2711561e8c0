"""The Python worker daemon, imported while the JVM starts instead of after it.

Why: on a cold `icetail changes` the first Spark job waits for PySpark's worker daemon to start
and import the read path (pyarrow, pyiceberg, and pandas through pyarrow.dataset): about 1 s of
a 7-9 s command on 2 cores (issue 24 s5, bench/RESULTS.md R44). Spark starts that daemon only
after its JVM is up, so nothing could overlap it. Here the driver starts a *zygote* beside the
JVM: a process of the workers' interpreter that imports and freezes the daemon's modules
(`spark_daemon.prepared`) at once, then waits on a Unix socket. When Spark later runs the daemon
module, that process (the *launcher*) hands its stdin, stdout and stderr and its environment to
the zygote, which becomes the daemon, already warm; the launcher stays as Spark's daemon
process, forwards SIGTERM to it and exits with it. A zygote serves one daemon (a session's);
the next session's driver starts another.

Spark's protocol is kept whole: the daemon talks to the JVM through the launcher's own pipes
(the port on stdout, kill requests on stdin, EOF on stdin when Spark is done) in the launcher's
environment (the worker secret, PYTHONPATH, spark.executorEnv). Anything wrong on the zygote's
side (not started, gone, used) and the launcher runs the daemon itself, as before. Local masters
only (the workers run on the driver's host); `ICETAIL_DAEMON_ZYGOTE=0` turns it off. The daemon
and its workers stay the driver's descendants (driver, zygote-become-daemon, workers), and an
unused zygote exits when the driver does (its stdin is a pipe from the driver).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from icetail.kernel.processes import process_is_running

SOCKET_ENV = "ICETAIL_DAEMON_ZYGOTE"  # where the launcher finds the zygote (set through spark.executorEnv)
OFF = "0"
MAX_SOCKET_PATH = 100  # AF_UNIX paths end at 108 bytes on Linux (a long TMPDIR)
HEADER_BYTES = 12  # the request's length, in ASCII digits, sent with the three descriptors
BIND_SECONDS = 30.0  # from the zygote's start to its socket: an interpreter's start, no imports
REPLY_SECONDS = 300.0
STOP_SECONDS = 5.0  # a zygote still importing on a loaded machine answers late, not never

# kept referenced (each one's stdin is its lifeline), with its socket: its directory goes when it is used
_zygotes: list[tuple[subprocess.Popen[bytes], str]] = []


def start_zygote(python: str, env: Mapping[str, str]) -> str | None:
    """Start a zygote of `python` with `env`; the socket path to give the launcher, None if unsupported.
    A zygote of an earlier session that no daemon used is stopped first."""
    if os.name != "posix" or not hasattr(socket, "send_fds") or os.environ.get(SOCKET_ENV) == OFF:
        return None
    stop_zygotes()
    directory = tempfile.mkdtemp(prefix="icetail-zygote-")  # 0700: the socket is this user's only
    path = os.path.join(directory, "daemon.sock")
    if len(path.encode()) >= MAX_SOCKET_PATH:
        os.rmdir(directory)
        return None
    try:
        process = subprocess.Popen(
            [python, "-m", "icetail.reader.spark.daemon_zygote", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=dict(env),
        )
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        return None
    _zygotes.append((process, path))
    return path


def stop_zygotes() -> None:
    """End the zygotes this process started that are still waiting (unused ones end by themselves
    when it exits; one that became a daemon is Spark's, and ends with its session)."""
    while _zygotes:
        process, path = _zygotes.pop()
        if process.stdin is not None:
            process.stdin.close()  # a waiting zygote exits; a daemon no longer reads this pipe
        if os.path.isdir(os.path.dirname(path)) and process.poll() is None:  # not a daemon (yet)
            with contextlib.suppress(ProcessLookupError):
                process.terminate()  # it may still be importing, deaf to its stdin
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_SECONDS)
            if process.returncode is not None:  # stopped before its handler was set: its socket stays
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        else:
            process.poll()  # reaped if it ended


def launch(path: str | None) -> bool:
    """The launcher: have the zygote become the daemon on this process's pipes, then wait for it.
    False when the zygote cannot be reached: the caller runs the daemon itself."""
    if not path or path == OFF:
        return False
    try:
        pid = _request(path)
    except (OSError, ValueError):
        return False
    signal.signal(signal.SIGTERM, lambda *_: _signal(pid, signal.SIGTERM))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as PySpark's daemon: not a reason to stop
    _wait_for(pid)
    return True


def _request(path: str) -> int:
    _await_socket(path)
    request = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:]}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(REPLY_SECONDS)
        conn.connect(path)
        socket.send_fds(conn, [b"%0*d" % (HEADER_BYTES, len(request))], [0, 1, 2])
        conn.sendall(request)
        reply = b""
        while not reply.endswith(b"\n"):
            part = conn.recv(64)
            if not part:
                raise ValueError("the zygote closed the connection without a daemon")
            reply += part
    return int(reply)


def _await_socket(path: str) -> None:
    """A zygote binds its socket first thing, but a loaded machine may start it after the JVM asked
    for the daemon: wait while its directory says it is starting (a zygote that failed removes it)."""
    deadline = time.monotonic() + BIND_SECONDS
    while not os.path.exists(path) and os.path.isdir(os.path.dirname(path)) and time.monotonic() < deadline:
        time.sleep(0.01)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_for(pid: int) -> None:
    """Until process `pid` (not our child) exits."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        while process_is_running(pid):
            select.select([], [], [], 0.5)
        return
    try:
        select.select([fd], [], [])  # readable once the process has exited
    finally:
        os.close(fd)


def serve(path: str) -> None:
    """The zygote: listen first (a launcher may connect while the imports run), import, then become
    the daemon of the first launcher that asks; or exit once the driver's end of stdin closes."""
    os.setpgid(0, 0)  # as PySpark's daemon does first (its own setpgid is then a no-op): no Ctrl-C
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped unused: remove the socket (finally)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    request = None
    try:
        listener.bind(path)
        listener.listen(4)
        from icetail.reader.spark.daemon import prepared

        daemon = prepared()
        while request is None:
            ready, _, _ = select.select([listener.fileno(), 0], [], [])
            if 0 in ready and not os.read(0, 4096):
                return  # the driver is gone
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                with conn:
                    request = _received(conn)
    finally:  # used or not, nobody else may connect
        listener.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    fds, env, cwd, argv, conn = request
    _become_daemon(fds, env, cwd, argv, conn, daemon)


Request = tuple[list[int], dict[str, str], str, list[str], socket.socket]


def _received(conn: socket.socket) -> Request | None:
    """The launcher's stdin, stdout and stderr, environment, directory and arguments."""
    conn.settimeout(REPLY_SECONDS)
    fds: list[int] = []
    try:
        header, fds, _, _ = socket.recv_fds(conn, HEADER_BYTES, 3)
        size = int(header)
        request = b""
        while len(request) < size:
            part = conn.recv(size - len(request))
            if not part:
                raise ValueError("the launcher closed the connection")
            request += part
        parsed = json.loads(request)
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} descriptors, not 3")
        return fds, parsed["env"], parsed["cwd"], parsed["argv"], conn.dup()
    except (OSError, ValueError, KeyError):
        for fd in fds:
            os.close(fd)
        return None


def _become_daemon(
    fds: list[int], env: dict[str, str], cwd: str, argv: list[str], conn: socket.socket, daemon: Any
) -> None:
    """Take the launcher's place: its pipes to the JVM, its environment (the worker secret,
    spark.executorEnv), then run PySpark's daemon loop, which ends the process."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv[1:] = argv  # Spark 4 names the worker module there (spark.python.worker.module)
    with conn:
        conn.sendall(b"%d\n" % os.getpid())  # fails if the launcher gave up: then no daemon at all
    daemon.manager()


if __name__ == "__main__":
    serve(sys.argv[1])
