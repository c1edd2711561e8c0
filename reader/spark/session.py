"""The SparkSession icetail reads with: its settings, the worker daemon beside the JVM, scheduler pools."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icetail.kernel import settings
from icetail.kernel.errors import ConfigError
from icetail.reader.spark.class_cache import (
    CacheUse,
    archive_is_damaged,
    class_cache,
    record_dumping_jvm,
    use_cache,
)
from icetail.reader.spark.daemon_zygote import SOCKET_ENV as ZYGOTE_SOCKET_ENV
from icetail.reader.spark.daemon_zygote import start_zygote
from icetail.reader.spark.java_runtime import check_java, java_binary
from icetail.reader.spark.jvm_probe import probe_java
from icetail.reader.spark.session_defaults import (
    DRIVER_MEMORY,
    SERIAL_GC,
    class_data_chosen,
    collector_chosen,
    tuned_defaults,
    user_set_keys,
)
from icetail.reader.spark.session_health import quiet_accumulator_server
from icetail.reader.spark.worker_python import check_worker_python, worker_python

log = logging.getLogger("icetail.spark")
_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

# Spark's own redaction (values of matching keys, and any value that matches, e.g. `sun.java.command`
# under spark-submit) extended to a password in a URL's userinfo, which names no `password` key.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|://[^/\s:@]*:[^/\s@]*@"

C1_ONLY = "-XX:TieredStopAtLevel=1"
DEFAULT_CONF = {
    "spark.redaction.regex": REDACTION_REGEX,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    # C1 only (`TieredStopAtLevel=1`): icetail's JVM schedules tasks and moves few bytes (the rows are
    # read and decoded in Python), and C2 kept compiling the scheduler's code round after round:
    # 0.1-1.0 CPU seconds of compiler threads in warm reads of 8M rows, on the cores the Python
    # workers decode on (issue 37 s2, bench/RESULTS.md R56); C1 compiles in 0.03-0.07 s a round.
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J} {C1_ONLY}",
}


# Arrow's allocator in the Python workers keeps freed memory a minute (icetail/kernel/settings.py
# PURGE_DELAY_ENV says why); a task that ends with `release_unused()` (the reconcile partitions)
# still returns it at once.
PURGE_DELAY_ENV = settings.PURGE_DELAY_ENV
WORKER_PURGE_DELAY_MS = settings.PURGE_DELAY_MS


# The Spark scheduler pool of the jobs a thread submits (`serve` gives each followed table its
# own): under `spark.scheduler.mode=FAIR` a big table's waves then share the cores with the small
# tables' instead of queueing them behind every task (Spark's FIFO). The jobs are submitted from
# icetail's own worker threads, which do not inherit the caller's Spark local properties, so the
# pool travels as a context variable read where the job is built.
_SCHEDULER_POOL: contextvars.ContextVar[str | None] = contextvars.ContextVar("icetail_scheduler_pool", default=None)
SCHEDULER_POOL_PROPERTY = "spark.scheduler.pool"


@contextlib.contextmanager
def scheduler_pool(name: str | None) -> Iterator[None]:
    """Spark jobs icetail submits in this context go to pool `name` (None: Spark's default pool)."""
    token = _SCHEDULER_POOL.set(name)
    try:
        yield
    finally:
        _SCHEDULER_POOL.reset(token)


def current_scheduler_pool() -> str | None:
    return _SCHEDULER_POOL.get()


def use_scheduler_pool(sc: Any, pool: str | None) -> None:
    """Put the jobs this thread submits next into `pool` (a Spark local property, per thread)."""
    if pool is not None:
        sc.setLocalProperty(SCHEDULER_POOL_PROPERTY, pool)


def spark_session(app_name: str = "icetail", conf: Mapping[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one (local[*] unless a master is configured)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = (conf or {}).get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if remote:
        # a Spark Connect client: the server owns master, UI and worker settings
        try:
            return SparkSession.builder.remote(remote).getOrCreate()
        except ImportError as exc:  # pyspark's PySparkImportError derives from ImportError
            raise ConfigError(
                f"SPARK_REMOTE={remote} asks for Spark Connect, but its client is not installed ({exc}); "
                "pip install 'icetail[connect]' or unset SPARK_REMOTE"
            ) from exc
    from pyspark import SparkContext

    if not submitted() and SparkContext._active_spark_context is None:  # else a JVM runs already
        check_java()
    # Python workers must run the interpreter that has icetail installed, not whatever is on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**DEFAULT_CONF, **(conf or {})}
    if not os.environ.get("MASTER") and "spark.master" not in settings and not submitted():
        settings["spark.master"] = "local[*]"
        # workers here run from this interpreter's site-packages, where reader.spark_daemon is
        settings.setdefault("spark.python.daemon.module", ICETAIL_DAEMON)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if PURGE_DELAY_ENV not in os.environ:  # the user's own setting wins
        settings.setdefault(f"spark.executorEnv.{PURGE_DELAY_ENV}", WORKER_PURGE_DELAY_MS)
    local = str(settings.get("spark.master", os.environ.get("MASTER", ""))).startswith("local")
    starts_jvm = local and not submitted() and SparkContext._active_spark_context is None
    tuned: dict[str, str] = {}
    if starts_jvm:
        # this process starts the JVM: icetail's sizes where the user chose none (session_defaults.py)
        tuned = {key: value for key, value in tuned_defaults(conf).items() if key not in settings}
        settings.update(tuned)
    if local:
        check_worker_python(settings)  # the workers run on this host: their Python can be asked now
        if settings.get("spark.python.daemon.module") == ICETAIL_DAEMON and SparkContext._active_spark_context is None:
            _start_daemon_zygote(settings)
    # after the checks that refuse a start: a refused one leaves the class cache as it was
    speed = _local_jvm_options(settings, conf, tuned) if starts_jvm else SpeedOptions()
    try:
        session = _builder(app_name, settings).getOrCreate()
    except Exception as exc:
        if not _gateway_exited(exc) or not _speed_options_to_blame(speed):
            raise
        session = _builder(app_name, speed.removed_from(settings)).getOrCreate()
    else:
        if speed.cache.dumping is not None:
            record_dumping_jvm(speed.cache.dumping, session)
    session.sparkContext.setLogLevel("ERROR")
    quiet_accumulator_server(session.sparkContext)
    return session


ICETAIL_DAEMON = "icetail.reader.spark.daemon"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def _builder(app_name: str, settings: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if not submitted():  # under spark-submit, --name decides
        builder = builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


@dataclass(frozen=True)
class SpeedOptions:
    """What icetail gave the JVM it starts for speed alone: a start without them reads the same rows."""

    flags: tuple[str, ...] = ()  # in spark.driver.extraJavaOptions: C1, the serial collector, the class cache's
    sizes: tuple[str, ...] = ()  # Spark settings icetail sized (the driver's heap)
    heap: str | None = None  # that heap, as the JVM gets it
    cache: CacheUse = CacheUse("")
    answers: Path | None = None  # the folder that keeps what the java said of them (jvm_probe.py)

    @property
    def probe_flags(self) -> list[str]:
        """The flags a `java -version` is asked with: the JVM options, the heap (not the class cache's)."""
        ours = [flag for flag in self.flags if flag not in self.cache.java_options.split()]
        return [*ours, f"-Xmx{self.heap}"] if self.heap else ours

    def removed_from(self, settings: Mapping[str, str]) -> dict[str, str]:
        kept = {key: value for key, value in settings.items() if key not in self.sizes}
        if JAVA_OPTIONS in kept:
            kept[JAVA_OPTIONS] = " ".join(flag for flag in kept[JAVA_OPTIONS].split() if flag not in self.flags)
        return kept


def _local_jvm_options(
    settings: dict[str, str], conf: Mapping[str, str] | None, tuned: Mapping[str, str]
) -> SpeedOptions:
    """icetail's options of the local JVM this process starts (C1, the serial collector, the class cache,
    the heap), each only where this java starts with it (jvm_probe.py); added to `settings`.

    Where the user set the JVM's options anywhere Spark reads them, theirs replace icetail's (set in
    spark-defaults.conf or PYSPARK_SUBMIT_ARGS, they would otherwise lose to icetail's, which reach
    Spark as the session's own conf)."""
    sizes = tuple(tuned)
    heap = tuned.get(DRIVER_MEMORY)
    if JAVA_OPTIONS in user_set_keys(conf or {}, os.environ):
        if JAVA_OPTIONS not in (conf or {}):
            settings.pop(JAVA_OPTIONS, None)
        return SpeedOptions(sizes=sizes, heap=heap)
    if not collector_chosen(os.environ):  # a second collector would stop the JVM at its start
        settings[JAVA_OPTIONS] = f"{settings[JAVA_OPTIONS]} {SERIAL_GC}"
    flags = tuple(flag for flag in (C1_ONLY, SERIAL_GC) if flag in settings[JAVA_OPTIONS].split())
    cache = class_cache()
    speed = SpeedOptions(flags, sizes, heap, answers=cache.folder if cache else None)
    java = java_binary(os.environ)
    if java is None:
        return speed
    answer = probe_java(java, speed.probe_flags, os.environ, speed.answers)
    if not answer.options_start:
        log.warning(
            "icetail: %s refuses icetail's JVM options for speed (%s); Spark starts without them", java, answer.refusal
        )
        kept = speed.removed_from(settings)
        settings.clear()
        settings.update(kept)
        return SpeedOptions()
    if cache is None or class_data_chosen(os.environ):
        return speed
    if not answer.base_archive:  # a jlink'd runtime without class data: no cache to write or map
        log.info("icetail: no JVM class cache: %s maps no base CDS archive (%s)", java, answer.refusal)
        return speed
    use = use_cache(cache)
    if not use.java_options:
        return speed
    settings[JAVA_OPTIONS] = f"{settings[JAVA_OPTIONS]} {use.java_options}"
    return SpeedOptions((*flags, *use.java_options.split()), sizes, heap, use, speed.answers)


def _speed_options_to_blame(speed: SpeedOptions) -> bool:
    """After the JVM died at its start: was it an option icetail added for speed? Says why in one line."""
    if not speed.flags and not speed.sizes:
        return False
    cause = None
    java = java_binary(os.environ)
    mapped, dumping = speed.cache.mapped, speed.cache.dumping
    if mapped is not None and archive_is_damaged(mapped):
        cause = f"the JVM class cache's archive {mapped.archive} is damaged (removed)"
        with contextlib.suppress(OSError):
            mapped.archive.unlink()
    elif java is not None:
        answer = probe_java(java, speed.probe_flags, os.environ, speed.answers, fresh=True)
        if not answer.options_start or (dumping is not None and not answer.base_archive):
            cause = f"{java} refuses them ({answer.refusal})"
    if dumping is not None:  # this process writes no archive now: a later start may
        with contextlib.suppress(OSError):
            dumping.dump_record.unlink()
    if cause is None:
        return False
    log.warning(
        "icetail: Spark's JVM did not start with icetail's options for speed: %s; starting it without them", cause
    )
    return True


def _gateway_exited(exc: BaseException) -> bool:
    """pyspark's "the JVM exited before it answered" (JAVA_GATEWAY_EXITED on 4.x, its text on 3.5)."""
    text = str(exc)
    return "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text


def _start_daemon_zygote(settings: dict[str, str]) -> None:
    """Import the worker daemon beside the JVM's start (reader/spark/daemon_zygote.py): in the workers'
    interpreter and environment as Spark will give them (its executorEnv and hash seed)."""
    executor_env = {
        k.removeprefix("spark.executorEnv."): v for k, v in settings.items() if k.startswith("spark.executorEnv.")
    }
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), **executor_env}
    path = start_zygote(worker_python(settings, os.environ)[0], env)
    if path is not None:
        settings[f"spark.executorEnv.{ZYGOTE_SOCKET_ENV}"] = path


def is_connect(spark: Any) -> bool:
    """A Spark Connect client session (no SparkContext, no RDDs: DataFrame operations only)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def submitted() -> bool:
    """Launched by spark-submit (which starts the JVM first and passes its gateway port)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT")) or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
