"""The worker daemon icetail selects for local masters is the one the Spark tasks run in."""

from __future__ import annotations

from typing import Any


def _worker_state(_: Any) -> list[tuple[str, int]]:
    import gc

    from pyspark import daemon

    return [(daemon.worker.__qualname__, gc.get_freeze_count())]


def test_tasks_run_in_icetail_daemon_with_frozen_imports(spark: Any) -> None:
    states = spark.sparkContext.parallelize(range(4), 4).mapPartitions(_worker_state).collect()
    assert len(states) == 4
    for loop, frozen in states:
        # the patched per-task loop (TCP_QUICKACK / TCP_NODELAY) is the one PySpark calls
        assert loop == "_worker"
        # the read path's imports were frozen before the fork, so gc.collect() skips them
        assert frozen > 10_000
