"""A Spark JVM that died under a run (the kernel's out-of-memory killer, a `kill -9`), told apart.

The JVM is usually the biggest process of a run, so it is what the out-of-memory killer picks.
What the driver then sees is a socket error from py4j or pyspark's accumulator server
(`ConnectionRefusedError`, `Py4JNetworkError`), which names neither the cause nor the fix. Nothing
past the delivered chunks is committed when it happens (the checkpoint moves only after a sink's
commit), so the error is transient for the batch: a new process resumes it. The session itself
cannot be used again, so a service exits for its orchestrator to restart it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from icetail.kernel.errors import SparkSessionLostError


def lost_session_error(exc: BaseException) -> SparkSessionLostError | None:
    """The one-line error `exc` stands for when this process's Spark JVM is gone; else None."""
    if isinstance(exc, SparkSessionLostError):
        return exc
    if "pyspark" not in sys.modules:  # no session was ever started: not a JVM's death
        return None
    # the JVM's sockets close as it dies, a moment before it can be reaped: a connection error
    # waits that moment for the process, any other error only looks
    code = jvm_exit_code(wait_seconds=EXIT_WAIT_SECONDS if _is_connection_error(exc) else 0.0)
    if code is None and not _is_py4j_network_error(exc):
        return None
    return SparkSessionLostError(
        f"the Spark JVM of this run exited mid-run ({_how(code)}); nothing past the delivered chunks was "
        "committed: run again to resume the batch, and if it was the out-of-memory killer (`dmesg`, a "
        "container's OOMKilled) give Spark more memory (spark.driver.memory, the container's limit) or "
        "read smaller batches (--chunk-rows, --max-snapshots-per-batch)"
    )


EXIT_WAIT_SECONDS = 3.0


def jvm_exit_code(wait_seconds: float = 0.0) -> int | None:
    """The exit status of the JVM this process launched once it has exited (waiting up to
    `wait_seconds` for it); None while it runs, or when it was not launched here (spark-submit
    starts the JVM before Python)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None) if gateway is not None else None
    if process is None:
        return None
    try:
        code: int | None = process.wait(timeout=wait_seconds) if wait_seconds > 0 else process.poll()
    except subprocess.TimeoutExpired:
        return None
    return code


def quiet_accumulator_server(spark_context: Any) -> None:
    """pyspark's accumulator server prints a traceback on stderr when the JVM's socket closes under
    it (its socketserver's default `handle_error`); the run says what happened in one line instead."""
    server = getattr(spark_context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = _ignore_request_error


def _ignore_request_error(request: Any, client_address: Any) -> None:
    return None


def _how(code: int | None) -> str:
    if code is None:
        return "its connection was lost"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "killed by SIGKILL, as the kernel's out-of-memory killer does"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionError, EOFError)) or _is_py4j_network_error(exc)


def _is_py4j_network_error(exc: BaseException) -> bool:
    try:
        from py4j.protocol import Py4JNetworkError
    except ImportError:  # pragma: no cover - pyspark always brings py4j
        return False
    return isinstance(exc, Py4JNetworkError)
