"""PySpark's worker daemon, minus three per-task costs that buy nothing for icetail.

Select it with `spark.python.daemon.module=icetail.reader.spark.daemon` (done for local masters).

* PySpark calls `importlib.invalidate_caches()` before every task, which makes every
  zipimporter re-read the central directory of `pyspark.zip` and py4j's zip: about 70 ms a task
  on a small machine. Those archives never change while a worker lives, so their zipimporters
  skip it here.
* A worker runs `gc.collect()` after every task; a full collection walks every object the
  read path's imports created (~100 ms with pyarrow, pyiceberg and pydantic loaded). The read
  path (and the Iceberg mirror's rewrite tasks) is imported here once, before the daemon forks,
  and frozen (`gc.freeze`), so the collector skips it in every forked worker.
* The JVM sends a task in two flushes over a TCP socket with Nagle's algorithm on, and the
  worker's kernel delays its ACK of the first (~40 ms, Linux's minimum delayed ACK), so the
  second waits: 40 ms a task. The worker re-arms TCP_QUICKACK before reading each task and
  sets TCP_NODELAY for its own replies.

Everything else is PySpark's own daemon. When the driver started a zygote (reader/spark/daemon_zygote.py),
this module, run by Spark, only hands it Spark's pipes: the zygote, these imports done, becomes the daemon.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from icetail.reader.spark.daemon_zygote import SOCKET_ENV, launch


def prepared() -> ModuleType:
    """`pyspark.daemon` with icetail's changes, the read path imported and frozen; idempotent."""
    import contextlib
    import gc
    import socket
    import zipimport

    from pyspark import daemon

    if getattr(daemon, "_icetail_prepared", False):
        return daemon
    zipimport.zipimporter.invalidate_caches = lambda self: None  # type: ignore[method-assign]

    with contextlib.suppress(ImportError):
        import icetail.reader.split.read  # noqa: F401
        import icetail.sinks.iceberg.mirror.tasks  # noqa: F401  (the Iceberg mirror's rewrite tasks)

    pyspark_worker = daemon.worker

    def _worker(sock: socket.socket, authenticated: bool) -> Any:
        """PySpark's per-task worker loop body, with the socket set to acknowledge at once."""
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)  # Linux only; not permanent
        try:
            return pyspark_worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            # the JVM hung up mid-task (its job was cancelled, or the driver is stopping): the JVM
            # side reports that; a worker traceback would only add noise to a stopped command's stderr
            return 1

    daemon.worker = _worker
    daemon._icetail_prepared = True  # type: ignore[attr-defined]
    gc.freeze()
    return daemon


if __name__ == "__main__" and not launch(os.environ.get(SOCKET_ENV)):
    prepared().manager()
