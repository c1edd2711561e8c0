"""PySpark's worker daemon, minus a per-task cost that buys nothing for icetail.

PySpark calls `importlib.invalidate_caches()` before every task, which makes every zipimporter
re-read the central directory of `pyspark.zip` and py4j's zip: about 70 ms a task on a small
machine, most of a small split's cost. Those archives never change while a worker lives, so
their zipimporters skip it here; everything else is PySpark's own daemon, selected with
`spark.python.daemon.module=reader.spark_daemon`.
"""

from __future__ import annotations

import contextlib
import zipimport

from pyspark import daemon

zipimport.zipimporter.invalidate_caches = lambda self: None  # type: ignore[method-assign]

# import the read path once here, before the daemon forks, instead of in every new worker
with contextlib.suppress(ImportError):
    import reader.split_reader  # noqa: F401

if __name__ == "__main__":
    daemon.manager()
