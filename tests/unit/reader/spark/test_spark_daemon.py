"""The worker daemon icetail selects for local masters is the one the Spark tasks run in."""

from __future__ import annotations

import os
from typing import Any

import pytest


def _worker_state(_: Any) -> list[tuple[str, int]]:
    import gc

    from pyspark import daemon

    return [(daemon.worker.__name__, gc.get_freeze_count())]


def test_tasks_run_in_icetail_daemon_with_frozen_imports(spark: Any) -> None:
    states = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_worker_state).collect()
    assert len(states) == 4
    for loop, frozen in states:
        # the patched per-task loop (TCP_QUICKACK / TCP_NODELAY) is the one PySpark calls
        assert loop == "_worker"
        # the read path's imports were frozen before the fork, so gc.collect() skips them
        assert frozen > 10_000


def _refaulted_pages(_: Any) -> list[tuple[str | None, int]]:
    """Minor page faults of touching the same Arrow allocations again after a pause: what a task
    pays when the allocator handed the previous task's freed memory back to the OS."""
    import os
    import resource
    import time

    import numpy as np
    import pyarrow as pa

    from icetail.reader.spark.session import PURGE_DELAY_ENV

    def touch() -> None:
        buffers = []
        for size in (1 << 20, 3 << 20, 200 << 10, 8 << 20) * 10:
            buffer = pa.allocate_buffer(size)
            np.frombuffer(buffer, dtype=np.uint8).fill(1)
            buffers.append(buffer)

    touch()
    time.sleep(0.2)  # past mimalloc's default purge delay (10 ms)
    pa.allocate_buffer(4096)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    touch()
    return [(os.environ.get(PURGE_DELAY_ENV), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)]


def test_workers_reuse_freed_arrow_memory_instead_of_faulting_it_in_again(spark: Any) -> None:
    """Issue 24 s5: warm rounds under load spent up to twice the worker CPU re-faulting memory the
    allocator had purged between tasks (R41). The workers keep it (MIMALLOC_PURGE_DELAY); with a
    10 ms delay the second touch re-faults about 1,400 pages here, with the setting none."""
    from icetail.reader.spark.session import WORKER_PURGE_DELAY_MS

    if pa_pool_backend() != "mimalloc":
        pytest.skip("pyarrow's default memory pool is not mimalloc here")
    ((setting, refaulted),) = spark.sparkContext.parallelize([0], 1).mapPartitions(_refaulted_pages).collect()
    assert setting == os.environ.get("MIMALLOC_PURGE_DELAY", WORKER_PURGE_DELAY_MS)
    assert refaulted < 200, refaulted


def pa_pool_backend() -> str:
    import pyarrow as pa

    return str(pa.default_memory_pool().backend_name)
