"""icetail's own Spark session, started when a batch needs it and stopped when none has for a while.

A `serve` following small tables reads every batch in its own process (the in-process engine)
and never needs a JVM; one big batch does. `SparkOnDemand` starts the session at the first
`start()`/`result()` (in the background, as BackgroundSession does) and, when `idle_stop_seconds`
passed since the last batch that held it (`held()`), stops it whole: the SparkContext, then the
JVM itself (pyspark keeps its gateway JVM for the process's life otherwise), so its memory goes
back. A later batch starts a new one. A batch holds the session from before its first read to
its end, so no stop lands under a running job.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from icetail.reader.spark.background import BackgroundSession
from icetail.reader.spark.daemon_zygote import stop_zygotes
from icetail.reader.spark.session import is_connect

log = logging.getLogger("icetail.spark")
JVM_EXIT_SECONDS = 30.0  # a JVM exits within this of its gateway closing (its class cache dump included)


class SparkOnDemand:
    """A Spark session started on first need; `idle_stop_seconds` None: kept until `close()`.

    `on_change(up, started)`: called after each start (`up` True, `started` True) and stop (`up`
    False), for metrics. Thread-safe: `serve`'s tables share one.
    """

    def __init__(
        self,
        app_name: str = "icetail",
        conf: Mapping[str, str] | None = None,
        *,
        idle_stop_seconds: float | None = None,
        on_change: Callable[[bool, bool], None] | None = None,
    ) -> None:
        self._app_name = app_name
        self._conf = dict(conf or {})
        self.idle_stop_seconds = idle_stop_seconds
        self._on_change = on_change
        self._lock = threading.Lock()
        self._background: BackgroundSession | None = None
        self._holders = 0  # batches that may read with it now
        self._idle_since = time.monotonic()
        self._used = False  # the current session was asked for (result()), not only started ahead
        self.starts = 0  # sessions started, for metrics and tests

    def start(self) -> None:
        """Begin a start in the background unless a session is up or starting."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> BackgroundSession:
        if self._background is None:
            self._background = BackgroundSession(self._app_name, self._conf)
            self._used = False
            self.starts += 1
            log.info("Spark session starting", extra={"starts": self.starts})
            if self._on_change is not None:
                self._on_change(True, True)
        return self._background

    def result(self) -> Any:
        """The session, started now if none is up (waited for if starting). A failed start is
        forgotten, so the next batch that needs Spark tries again."""
        with self._lock:
            background = self._start_locked()
            self._used = True
        try:
            return background.result()
        except BaseException:
            with self._lock:
                if self._background is background:
                    self._background = None
                    self._changed(up=False)
            raise

    @property
    def up(self) -> bool:
        """A session is up or starting."""
        return self._background is not None

    @property
    def starting(self) -> bool:
        background = self._background
        return background is not None and background.starting

    @property
    def warming_up(self) -> bool:
        background = self._background
        return background is not None and background.warming_up

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Around a batch that may read with the session: no idle stop until it ends."""
        with self._lock:
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                self._idle_since = time.monotonic()

    def stop_if_idle(self, now: float | None = None) -> bool:
        """Stop the session when no batch held it for `idle_stop_seconds`; whether it was stopped."""
        if self.idle_stop_seconds is None:
            return False
        with self._lock:
            background = self._background
            now = time.monotonic() if now is None else now
            if background is None or self._holders or background.starting:
                return False
            if now - self._idle_since < self.idle_stop_seconds:
                return False
            self._background = None
            # under the lock: a batch that needs Spark now waits for this stop, then starts anew
            idle = now - self._idle_since
            _stop_whole(background)
            self._changed(up=False)
        log.info("Spark session stopped", extra={"idle_seconds": round(idle, 1)})
        return True

    def close(self, *, abandon: bool = False) -> None:
        """Stop the session: `abandon` gives up one still starting at once (BackgroundSession.abandon),
        as is one started ahead for a batch that then read in process (never asked for)."""
        with self._lock:
            background, self._background = self._background, None
            used = self._used
        if background is None:
            return
        if abandon or not used:
            background.abandon()
        else:
            background.close()
        self._changed(up=False)

    def _changed(self, *, up: bool) -> None:
        if self._on_change is not None:
            self._on_change(up, False)


def _stop_whole(background: BackgroundSession) -> None:
    """Stop a session that finished starting, and the JVM this process launched for it."""
    background.close()  # its warm-up job cancelled, its start over
    try:
        session = background.result()
    except BaseException:  # noqa: BLE001 - a failed start has nothing to stop
        return
    session.stop()
    if is_connect(session):
        return
    stop_launched_jvm()


def stop_launched_jvm() -> None:
    """End the gateway JVM this process launched (none under spark-submit): pyspark keeps it
    after `SparkContext.stop()`, and reuses it for the next session, memory and all.

    The JVM exits by itself when its stdin closes (pyspark's gateway server watches it), running its
    shutdown hooks, so a class cache archive it writes at exit is written whole.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    try:
        process.wait(JVM_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None
    stop_zygotes()
