"""A SparkSession started in the background while the driver plans, and given up at once if the plan fails."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, wait
from typing import Any

from icetail.kernel import seams
from icetail.kernel.processes import child_processes
from icetail.reader.spark.daemon_zygote import stop_zygotes
from icetail.reader.spark.handoff import executors_share_driver_host
from icetail.reader.spark.session import is_connect, spark_session

# What a Spark JVM this process launches runs as: pyspark's `bin/spark-submit`, then
# `spark-class`, then `java ... org.apache.spark.deploy.SparkSubmit`.
SPARK_LAUNCH_MARKERS = ("bin/spark-submit", "bin/spark-class", "org.apache.spark.deploy.SparkSubmit")
ABANDON_SECONDS = 2.0


class SessionAbandoned(Exception):
    """The start of a BackgroundSession was given up before it began."""


class BackgroundSession:
    """`spark_session` started on a thread, then its Python workers warmed, while the caller goes on.

    A one-shot command spends seconds starting the JVM and then seconds more on its first
    Python task (the worker daemon starts and imports the read path); both overlap the catalog
    load and planning this way. `result()` raises what `spark_session` raised. `close()` must
    follow: a process that exits under the running warm-up job makes Spark log stack traces
    after icetail's own last line.
    """

    def __init__(self, app_name: str = "icetail", conf: Mapping[str, str] | None = None) -> None:
        self._future: Future[Any] = Future()
        self._lock = threading.Lock()
        self._closing = False
        self._warming: Any = None  # the SparkContext while its warm-up job runs
        self._group = f"icetail-warmup-{uuid.uuid4().hex[:8]}"
        self._settled = threading.Event()  # the start and the warm-up are over, however they ended
        self._children_before = frozenset(child_processes())  # a JVM running already is never abandon()'s
        self._thread = threading.Thread(
            target=self._start, args=(app_name, conf), name="icetail-session-start", daemon=True
        )
        self._thread.start()

    def result(self) -> Any:
        return self._future.result()

    @property
    def starting(self) -> bool:
        """The JVM start has not finished (neither succeeded nor failed) yet."""
        return not self._future.done()

    @property
    def warming_up(self) -> bool:
        """The JVM still starts, or its Python workers' warm-up job still runs: a job now would wait."""
        return not self._settled.is_set()

    def close(self) -> None:
        """Wait for the start to finish, cancel the warm-up job if it runs and wait for it too.

        Waiting for a start the caller no longer needs (it failed first) keeps the JVM's own
        start-up notes before the caller's last line instead of after it.
        """
        wait([self._future])
        with self._lock:
            self._closing = True
            warming = self._warming
        if warming is not None:
            warming.cancelJobGroup(self._group)
            self._thread.join()

    def abandon(self) -> None:
        """Stop now, without waiting for a start still under way (the caller failed or needs no Spark).

        A JVM still starting is stopped (SIGTERM to the Spark launcher this session started, never
        to one that ran before it: it runs its shutdown hooks), which ends the start thread within
        a poll of pyspark's launcher and lets it remove its scratch; waited for at most
        ABANDON_SECONDS, and the launcher's exit (its last log lines) as long again. A finished
        start is closed as `close()` does.
        """
        with self._lock:
            self._closing = True
        deadline = time.monotonic() + ABANDON_SECONDS
        stopped: set[int] = set()
        while not self._future.done() and time.monotonic() < deadline:
            for pid, command in child_processes().items():
                if pid not in self._children_before and any(marker in command for marker in SPARK_LAUNCH_MARKERS):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGTERM)
                    stopped.add(pid)
            self._thread.join(0.05)
        # a SparkContext cut short logs its error as the JVM shuts down: let it, so that the caller's
        # own last line (`stopped by SIGTERM`) comes after it, not before (a zombie has no command line)
        deadline += ABANDON_SECONDS
        while time.monotonic() < deadline and any(child_processes().get(pid) for pid in stopped):
            time.sleep(0.05)
        stop_zygotes()  # the worker daemon's zygote, unused (reader/spark/daemon_zygote.py)
        if self._future.done():
            self.close()

    def _start(self, app_name: str, conf: Mapping[str, str] | None) -> None:
        try:
            self._start_and_warm(app_name, conf)
        finally:
            self._settled.set()

    def _start_and_warm(self, app_name: str, conf: Mapping[str, str] | None) -> None:
        try:
            from pyspark import SparkContext

            running = SparkContext._active_spark_context is not None  # its workers are warm already
            self._hold_for_test()
            with self._lock:
                if self._closing:  # abandoned before the JVM was asked for: never start it
                    raise SessionAbandoned("the Spark session was abandoned before it started")
            session = spark_session(app_name, conf)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            self._future.set_exception(exc)
            return
        self._future.set_result(session)
        if running or is_connect(session) or not executors_share_driver_host(session.sparkContext):
            return
        sc = session.sparkContext
        with self._lock:
            if self._closing:
                return
            self._warming = sc
        try:  # warm-up only: any failure shows again, in context, in the real job
            slots = int(sc.defaultParallelism)
            sc.setJobGroup(self._group, "icetail worker warm-up", interruptOnCancel=True)
            sc.parallelize(range(slots), slots).mapPartitions(lambda _: iter(())).count()
        except Exception:  # noqa: BLE001, S110
            pass
        finally:
            with self._lock:
                self._warming = None

    def _hold_for_test(self) -> None:
        """Test seam (kernel/seams.py): a test may hold the start here, before it asks for the JVM,
        so it can stop a run whose session is provably still starting instead of racing the JVM's start."""
        seams.reached(seams.SESSION_START, self._closing_after)

    def _closing_after(self, seconds: float) -> bool:
        """Whether the session was given up, looked at after `seconds`."""
        time.sleep(seconds)
        with self._lock:
            return self._closing
