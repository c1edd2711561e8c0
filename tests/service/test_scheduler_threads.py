"""`serve`'s scheduler runs every due table at once (issue 24 §3): one thread per table, up to a bound.

With APScheduler's default pool of 10 threads, 50 tables due together waited for a thread, not for
Spark (R32). These tests run the scheduler `serve` builds from a real 50-table configuration with
jobs that meet at a barrier: the barrier opens only if all 50 run at the same time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.service.config import MAX_DEFAULT_CONCURRENT_TABLES
from icetail.monitor.service.scheduler import build_scheduler, spark_scheduler_conf
from tests.service.test_service_config import build, config_error


def tables(count: int) -> dict[str, Any]:
    return {
        "catalog": "prod",
        "state": "sqlite:////var/lib/icetail/state.db",
        "tables": [{"table": f"db.t{i}", "sink": f"parquet:///out/t{i}"} for i in range(count)],
    }


def started_together(threads: int, jobs: int, wait_seconds: float) -> tuple[int, int]:
    """Run `jobs` jobs due now on build_scheduler(threads), each waiting for all `jobs` at a barrier:
    (jobs that passed the barrier, most jobs seen running at once)."""
    barrier = threading.Barrier(jobs)
    lock = threading.Lock()
    running, most, passed = 0, 0, 0
    finished = threading.Semaphore(0)

    def job() -> None:
        nonlocal running, most, passed
        with lock:
            running += 1
            most = max(most, running)
        try:
            barrier.wait(timeout=wait_seconds)
            with lock:
                passed += 1
        except threading.BrokenBarrierError:
            pass
        finally:
            with lock:
                running -= 1
            finished.release()

    scheduler = build_scheduler(threads)
    for i in range(jobs):
        scheduler.add_job(job, id=f"t{i}")  # no trigger: due now, once
    scheduler.start()
    try:
        for _ in range(jobs):
            assert finished.acquire(timeout=120), "a job never ran"
    finally:
        scheduler.shutdown(wait=True)
    return passed, most


def test_fifty_tables_due_at_once_all_start_together(tmp_path: Path) -> None:
    config = build(tmp_path, tables(50))
    assert config.scheduler_threads == 50
    passed, most = started_together(config.scheduler_threads, 50, wait_seconds=60)
    assert (passed, most) == (50, 50)


def test_fewer_threads_than_tables_run_at_most_that_many() -> None:
    """The bound is real: 10 threads (APScheduler's default, serve before R33) never run 11 cycles."""
    passed, most = started_together(10, 11, wait_seconds=2)  # the 11th can never join
    assert passed == 0 and most == 10


def test_threads_default_to_one_per_table_up_to_the_bound(tmp_path: Path) -> None:
    assert build(tmp_path, tables(1)).scheduler_threads == 1
    assert build(tmp_path, tables(7)).scheduler_threads == 7
    many = MAX_DEFAULT_CONCURRENT_TABLES + 6
    assert build(tmp_path, tables(many)).scheduler_threads == MAX_DEFAULT_CONCURRENT_TABLES
    assert build(tmp_path, {**tables(many), "concurrent_tables": many}).scheduler_threads == many
    assert build(tmp_path, tables(7), ICETAIL_CONCURRENT_TABLES="3").scheduler_threads == 3


@pytest.mark.parametrize("value", [0, -2])
def test_concurrent_tables_must_be_positive(tmp_path: Path, value: int) -> None:
    assert "concurrent_tables must be >= 1" in config_error(tmp_path, {**tables(2), "concurrent_tables": value})


def test_spark_scheduler_mode(tmp_path: Path) -> None:
    assert spark_scheduler_conf(None, 1) is None  # one table: Spark's default
    assert spark_scheduler_conf(None, 2) == {"spark.scheduler.mode": "FAIR"}
    assert spark_scheduler_conf("fifo", 50) == {"spark.scheduler.mode": "FIFO"}
    assert spark_scheduler_conf("fair", 1) == {"spark.scheduler.mode": "FAIR"}
    assert build(tmp_path, {**tables(2), "spark_scheduler_mode": "FIFO"}).spark_scheduler_mode == "fifo"
    message = config_error(tmp_path, {**tables(2), "spark_scheduler_mode": "round-robin"})
    assert "spark_scheduler_mode must be one of fair, fifo" in message
