"""Driver side: run splits as Spark tasks and stream their chunks back in plan order.

Splits run in waves, one Spark job per wave; a wave's splits are cut into a few Spark tasks per
core, each a contiguous run of splits of about equal input bytes (so one big file spread over
many splits spreads over the workers, and the per-task cost is paid per few splits rather than
per split). Tasks return Arrow IPC bytes, or only chunk metadata when a stager writes the rows
in the task; with a local master they publish each chunk in a handoff file instead, which the
driver streams while the job runs. Local mode by default; any master via standard Spark config.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from icetail.kernel import seams
from icetail.kernel.errors import ConfigError, DataFileError, IcetailError, is_disk_full
from icetail.kernel.model import ChangeSplit
from icetail.kernel.processes import child_processes, host_tag, process_is_running
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind
from icetail.reader.context import ReadContext
from icetail.reader.daemon_zygote import SOCKET_ENV as ZYGOTE_SOCKET_ENV
from icetail.reader.daemon_zygote import start_zygote, stop_zygotes
from icetail.reader.java_runtime import check_java
from icetail.reader.local_disk import handoff_full, spark_job_error
from icetail.reader.metadata_columns import constant_column_count, with_constant_metadata
from icetail.reader.session_health import quiet_accumulator_server
from icetail.reader.split_reader import Chunk, read_split
from icetail.reader.worker_python import check_worker_python, worker_python
from icetail.sinks.base import ChunkStager, SplitSlot

_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

# Spark's own redaction (values of matching keys, and any value that matches, e.g. `sun.java.command`
# under spark-submit) extended to a password in a URL's userinfo, which names no `password` key.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|://[^/\s:@]*:[^/\s@]*@"

DEFAULT_CONF = {
    "spark.redaction.regex": REDACTION_REGEX,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J}",
}


# Arrow's allocator in the Python workers (mimalloc, pyarrow's default) hands freed pages back to
# the OS soon after a task frees them, at the next task's first allocations: that task then
# faults its working set in again, in the kernel (under load, warm reads of 8M rows spent 0.2 to
# 1.5 s of worker system CPU per round for the same 0.7 s of user CPU; issue 24 s5, bench/RESULTS.md
# R41). Kept for a minute instead, memory freed by one task is reused by the next; an idle worker
# returns it at its next task, and a task that ends with `release_unused()` (the reconcile
# partitions) still returns it at once.
PURGE_DELAY_ENV = "MIMALLOC_PURGE_DELAY"
WORKER_PURGE_DELAY_MS = "60000"


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

    if not _submitted() and SparkContext._active_spark_context is None:  # else a JVM runs already
        check_java()
    # Python workers must run the interpreter that has icetail installed, not whatever is on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    if not _submitted():  # under spark-submit, --name decides
        builder = builder.appName(app_name)
    settings = {**DEFAULT_CONF, **(conf or {})}
    if not os.environ.get("MASTER") and "spark.master" not in settings and not _submitted():
        settings["spark.master"] = "local[*]"
        # workers here run from this interpreter's site-packages, where reader.spark_daemon is
        settings.setdefault("spark.python.daemon.module", ICETAIL_DAEMON)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if PURGE_DELAY_ENV not in os.environ:  # the user's own setting wins
        settings.setdefault(f"spark.executorEnv.{PURGE_DELAY_ENV}", WORKER_PURGE_DELAY_MS)
    if str(settings.get("spark.master", os.environ.get("MASTER", ""))).startswith("local"):
        check_worker_python(settings)  # the workers run on this host: their Python can be asked now
        if settings.get("spark.python.daemon.module") == ICETAIL_DAEMON and SparkContext._active_spark_context is None:
            _start_daemon_zygote(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    quiet_accumulator_server(session.sparkContext)
    return session


ICETAIL_DAEMON = "icetail.reader.spark_daemon"


def _start_daemon_zygote(settings: dict[str, str]) -> None:
    """Import the worker daemon beside the JVM's start (reader/daemon_zygote.py): in the workers'
    interpreter and environment as Spark will give them (its executorEnv and hash seed)."""
    executor_env = {
        k.removeprefix("spark.executorEnv."): v for k, v in settings.items() if k.startswith("spark.executorEnv.")
    }
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), **executor_env}
    path = start_zygote(worker_python(settings, os.environ)[0], env)
    if path is not None:
        settings[f"spark.executorEnv.{ZYGOTE_SOCKET_ENV}"] = path


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
        ABANDON_SECONDS. A finished start is closed as `close()` does.
        """
        with self._lock:
            self._closing = True
        deadline = time.monotonic() + ABANDON_SECONDS
        while not self._future.done() and time.monotonic() < deadline:
            for pid, command in child_processes().items():
                if pid not in self._children_before and any(marker in command for marker in SPARK_LAUNCH_MARKERS):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGTERM)
            self._thread.join(0.05)
        stop_zygotes()  # the worker daemon's zygote, unused (reader/daemon_zygote.py)
        if self._future.done():
            self.close()

    def _start(self, app_name: str, conf: Mapping[str, str] | None) -> None:
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
        if running or is_connect(session) or not _executors_share_driver_host(session.sparkContext):
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


def is_connect(spark: Any) -> bool:
    """A Spark Connect client session (no SparkContext, no RDDs: DataFrame operations only)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _parallelism(spark: Any) -> int:
    """Cores to plan tasks for: the context's default parallelism, or on Spark Connect (which
    hides the cluster) `spark.default.parallelism` when set, else this host's cores."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    return int(configured) if configured else os.cpu_count() or 2


def _submitted() -> bool:
    """Launched by spark-submit (which starts the JVM first and passes its gateway port)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT")) or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


@dataclass(frozen=True)
class SplitRequest:
    """A split to run and the file row where it resumes (0 for a fresh split)."""

    split: ChangeSplit
    start_row_inclusive: int = 0
    # with a stager: the task writes the chunks itself under keys (consumer, batch id, split index)
    stage_as: SplitSlot | None = None
    # rows carry `_row_id` and `_last_updated_sequence_number` (for the output, or for update pairing)
    with_row_lineage: bool = False


@dataclass(frozen=True)
class _ChunkPayload:
    """A chunk on its way from a task to the driver; `chunk.batch` is None, its rows are in `data`.

    `data` is Arrow IPC stream bytes, the path of a handoff file, or empty (no rows, or staged);
    `constant` holds the four metadata values when every row shares them (they were cut off).
    """

    chunk: Chunk
    data: bytes | str
    constant: tuple[Any, ...] | None


@dataclass(frozen=True)
class TaskErrorPayload:
    """An IcetailError a task ended with, by class, for the driver to raise again."""

    module: str
    name: str
    message: str


_Payload = _ChunkPayload | TaskErrorPayload

DEFAULT_WAVE_BYTES = 64 * 1024 * 1024  # estimated parquet bytes read by one Spark job (three held at once)
# With a local handoff the results are files the driver streams as they appear, not a collected
# list, so a wave only bounds how far the tasks run ahead of the consumer (in temporary files);
# each Spark job costs ~75 ms of JVM CPU, which bigger waves spread over more rows.
HANDOFF_WAVE_BYTES = 256 * 1024 * 1024
# A wave is cut by its bytes; the count bound only keeps a wave of tiny splits finite. Each wave is
# a Spark job (~60 ms in local mode), so 200 files of 10k rows in waves of 64 splits read in 0.67 s
# against 0.45 s in one wave (R25).
MAX_WAVE_SPLITS = 1024
WAVES_IN_FLIGHT = 2  # Spark jobs submitted ahead of the wave being consumed
TASKS_PER_CORE = 2  # Spark tasks per wave and core: enough to even out skew, few enough to amortize a task


def plan_waves(requests: Sequence[SplitRequest], max_splits: int, max_bytes: int) -> list[list[SplitRequest]]:
    """Consecutive groups of splits, each bounded in count and in estimated input bytes."""
    waves: list[list[SplitRequest]] = []
    current: list[SplitRequest] = []
    size = 0
    for request in requests:
        estimate = max(request.split.estimated_bytes, 1)
        if current and (len(current) >= max_splits or size + estimate > max_bytes):
            waves.append(current)
            current, size = [], 0
        current.append(request)
        size += estimate
    if current:
        waves.append(current)
    return waves


def group_for_tasks(wave: Sequence[SplitRequest], max_tasks: int) -> list[list[SplitRequest]]:
    """`wave` as at most `max_tasks` contiguous runs of splits of about equal bytes.

    Contiguous runs keep the wave's order when the tasks' results are concatenated, and the
    cut depends only on the splits, so the same wave always maps to the same tasks.
    """
    if not wave:
        return []
    count = max(1, min(max_tasks, len(wave)))
    sizes = [max(r.split.estimated_bytes, 1) for r in wave]
    total = sum(sizes)
    groups: list[list[SplitRequest]] = [[]]
    filled = 0
    for index, (request, size) in enumerate(zip(wave, sizes, strict=True)):
        left_splits, left_groups = len(wave) - index, count - len(groups)
        # a new task once this one holds its share, or when every remaining task needs a split
        if groups[-1] and left_groups > 0 and (filled >= total * len(groups) / count or left_splits <= left_groups):
            groups.append([])
        groups[-1].append(request)
        filled += size
    return groups


def run_splits(
    spark: Any,
    context: ReadContext,
    requests: Sequence[SplitRequest],
    *,
    chunk_rows: int | None = None,
    wave_bytes: int | None = None,
    stager: ChunkStager | None = None,
) -> Iterator[Chunk]:
    """Chunks of every split, in request order then file order (batches travel as Arrow IPC).

    Splits run in waves: one Spark job per wave and a few tasks per core, each reading a
    contiguous run of splits, so small splits pay neither a job nor a task each and a wave's
    results bound driver memory. The next waves run while the caller consumes the current one.
    """
    if not requests:
        return
    parallelism = _parallelism(spark)
    group = f"icetail-{uuid.uuid4().hex[:12]}"
    connect = is_connect(spark)
    pool_name = current_scheduler_pool()  # read here: the wave threads below do not see the context
    # tasks on this host hand their rows over in files the driver maps, not through the JVM
    handoff = _new_handoff_dir() if not connect and _executors_share_driver_host(spark.sparkContext) else None
    if wave_bytes is None:
        wave_bytes = HANDOFF_WAVE_BYTES if handoff is not None else DEFAULT_WAVE_BYTES
    waves = plan_waves(requests, max(MAX_WAVE_SPLITS, 4 * parallelism), wave_bytes)

    submitting = [threading.Event() for _ in waves]  # wave i's job goes to Spark after wave i-1's
    wave_groups = [group_for_tasks(wave, TASKS_PER_CORE * parallelism) for wave in waves]

    def collect(index: int) -> list[_Payload]:
        try:
            groups = wave_groups[index]
            if connect:
                spark.addTag(group)  # tags are per thread: this wave's job carries it
                job = _connect_wave_job(spark, groups, context, chunk_rows, stager)
            else:
                sc = spark.sparkContext
                sc.setJobGroup(group, "icetail change read", interruptOnCancel=True)
                use_scheduler_pool(sc, pool_name)
                rdd = sc.parallelize(groups, numSlices=len(groups))
                if handoff is None:
                    job = rdd.mapPartitions(lambda part: _run_partition(context, part, chunk_rows, stager, None))
                else:  # each task publishes its chunks in `handoff` as it reads them (see _stream_task)
                    job = rdd.mapPartitionsWithIndex(
                        lambda task, part: _publish_partition(
                            context, part, chunk_rows, stager, handoff, _task_key(index, task)
                        )
                    )
            if index > 0:
                submitting[index - 1].wait()
        finally:
            submitting[index].set()  # even on an error here: the next wave must not wait forever
        if connect:
            return [pickle.loads(row[0]) for row in job.collect()]
        return list(job.collect())

    pool = ThreadPoolExecutor(max_workers=WAVES_IN_FLIGHT, thread_name_prefix="icetail-wave")
    finished = False
    try:
        # the next wave's job is already queued when this one's last tasks run, so Spark's FIFO
        # scheduler fills the cores they free: no idle barrier and no job start between waves
        in_flight = deque(pool.submit(collect, index) for index in range(min(WAVES_IN_FLIGHT, len(waves))))
        submitted = len(in_flight)
        consumed = 0
        while in_flight:
            future = in_flight.popleft()
            if handoff is not None:
                # chunks stream in as the tasks write them, before the wave's job has finished
                for task in range(len(wave_groups[consumed])):
                    yield from _stream_task(handoff, _task_key(consumed, task), future)
                _raise_task_results(job_result(future))
                payloads: list[_Payload] = []
            else:
                payloads = job_result(future)  # a task error surfaces as a Py4J/Spark exception
            if submitted < len(waves):
                in_flight.append(pool.submit(collect, submitted))
                submitted += 1
            consumed += 1
            for payload in payloads:
                yield _decode(payload)
        finished = True
    finally:
        if not finished:  # the caller stopped early or a chunk failed: do not finish reading for nobody
            if connect:
                spark.interruptTag(group)
            else:
                spark.sparkContext.cancelJobGroup(group)
        # Wait for the cancelled jobs to end: chunks stream in while a job runs, so an error can
        # reach the caller mid-job, and a process that then exits under a running job makes
        # Spark log stack traces (its tasks lose the driver's sockets) after icetail's one line.
        pool.shutdown(wait=True, cancel_futures=True)
        if handoff is not None:  # chunks already handed over stay readable: their files are mapped
            shutil.rmtree(handoff, ignore_errors=True)


def _take_published(path: str) -> _Payload | None:
    """The payload published at `path` (the file is removed), or None when it is not there yet."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    os.unlink(path)
    payload: _Payload = pickle.loads(data)
    return payload


def _task_key(wave: int, task: int) -> str:
    return f"w{wave:06d}-t{task:05d}"


def _publish_partition(
    context: ReadContext, part: Any, chunk_rows: int | None, stager: ChunkStager | None, handoff: str, key: str
) -> Iterator[int | TaskErrorPayload]:
    """Run the task's splits, publishing each chunk payload as `<key>-<seq>.chunk` the moment it is
    read, then `<key>.end`; yields the chunk count (Spark's result is only the job's completion), or
    the error that kept it from publishing (a full disk leaves no room for an error file)."""
    count = 0
    try:
        for payload in _run_partition(context, part, chunk_rows, stager, handoff):
            _publish(os.path.join(handoff, f"{key}-{count:07d}.chunk"), pickle.dumps(payload))
            count += 1
        _publish(os.path.join(handoff, f"{key}.end"), b"")
    except OSError as exc:  # no file can carry the error now: it goes back as the task's result
        error = (
            handoff_full(os.path.dirname(handoff))
            if is_disk_full(exc)
            else IcetailError(f"cannot write icetail's handoff file in {handoff}: {exc}")
        )
        yield TaskErrorPayload(type(error).__module__, type(error).__name__, str(error))
        return
    yield count


def _publish(path: str, data: bytes) -> None:
    """Write then rename: the driver sees a whole file or none (no fsync: it is the same host's page cache)."""
    try:
        with open(path + ".tmp", "wb") as stream:
            stream.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path + ".tmp")  # a partial file of a full disk: its space back
        raise
    os.replace(path + ".tmp", path)


MAX_POLL_SECONDS = 0.005


def job_result(job: Future[Any]) -> Any:
    """The job's result; a job that failed on a full local disk raises that one line instead."""
    try:
        return job.result()
    except Exception as exc:
        translated = spark_job_error(exc, _active_context())
        if translated is None:
            raise
        raise translated from None


def _active_context() -> Any | None:
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _raise_task_results(results: Sequence[Any]) -> None:
    """Raise the first error a task returned as its result (it could not publish it as a file)."""
    for result in results:
        if isinstance(result, TaskErrorPayload):
            raise_task_error(result)


def _stream_task(handoff: str, key: str, wave: Future[Any]) -> Iterator[Chunk]:
    """The chunks task `key` publishes, in order, as they appear; ends at its `.end` marker.

    While nothing new is there, the wave's job is checked: a failed job raises its error, and a
    job that finished without the task's files is a lost handoff.
    """
    end = os.path.join(handoff, f"{key}.end")
    seq, wait = 0, 0.0005
    while True:
        path = os.path.join(handoff, f"{key}-{seq:07d}.chunk")
        payload = _take_published(path)
        if payload is None:
            if os.path.exists(end):  # written after every chunk of the task: look once more
                if os.path.exists(path):
                    continue
                return
            if wave.done():
                _raise_task_results(job_result(wave))  # a failed job, or a task that could not publish
                if not os.path.exists(path) and not os.path.exists(end):
                    raise IcetailError(f"Spark task {key} finished without handing over its chunks in {handoff}")
                continue
            time.sleep(wait)
            wait = min(wait * 2, MAX_POLL_SECONDS)
            continue
        seq, wait = seq + 1, 0.0005
        yield _decode(payload)


HANDOFF_PREFIX = "icetail-handoff-"
_orphans_removed = threading.Event()


def _new_handoff_dir() -> str:
    """A fresh directory `icetail-handoff-<host>-<pid>-...` under the temporary directory.

    The first one of a process also removes those that drivers of this host left behind when
    they were killed (a SIGKILL skips every clean-up), so a crash loop cannot fill the disk.
    """
    if not _orphans_removed.is_set():
        _orphans_removed.set()
        remove_orphaned_handoffs(tempfile.gettempdir())
    return tempfile.mkdtemp(prefix=f"{HANDOFF_PREFIX}{host_tag()}-{os.getpid()}-")


def remove_orphaned_handoffs(root: str) -> int:
    """Delete the handoff directories under `root` whose driver (a process of this host) is gone."""
    mine = f"{HANDOFF_PREFIX}{host_tag()}-"
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        pid = entry.name[len(mine) :].split("-", 1)[0] if entry.name.startswith(mine) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not process_is_running(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed


def _executors_share_driver_host(sc: Any) -> bool:
    """A local master: executors run on the driver's host and see its temporary directory."""
    return str(sc.master).startswith("local")


def _connect_wave_job(
    spark: Any,
    groups: list[list[SplitRequest]],
    context: ReadContext,
    chunk_rows: int | None,
    stager: ChunkStager | None,
) -> Any:
    """The wave as a DataFrame job for Spark Connect, which has no RDDs.

    Task i of `range(n)` runs `groups[i]` in `mapInArrow` and returns each chunk payload
    pickled in one binary row; partitions come back in order, so the wave's order holds.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task_index in batch.column(0).to_pylist():
                for payload in _run_partition(context, [groups[task_index]], chunk_rows, stager, None):
                    yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(payload)], pa.binary())], ["payload"])

    return spark.range(0, len(groups), 1, len(groups)).mapInArrow(run, "payload binary")


def _run_partition(
    context: ReadContext, part: Any, chunk_rows: int | None, stager: ChunkStager | None, handoff: str | None
) -> Iterator[_Payload]:
    for group in part:
        for request in group:
            error = yield from _run_split(context, request, chunk_rows, stager, handoff)
            if error:
                return


def _run_split(
    context: ReadContext,
    request: SplitRequest,
    chunk_rows: int | None,
    stager: ChunkStager | None,
    handoff: str | None,
) -> Generator[_Payload, None, bool]:
    """Yields the split's chunk payloads; returns True after yielding an error (the task stops)."""
    try:
        for chunk in read_split(
            context,
            request.split,
            start_row_inclusive=request.start_row_inclusive,
            chunk_rows=chunk_rows,
            with_row_lineage=request.with_row_lineage,
        ):
            if stager is not None and request.stage_as is not None:
                chunk = _staged(stager, request.stage_as, chunk)
            yield _encode(chunk, handoff)
    except (IcetailError, OSError, pa.ArrowException) as exc:
        yield task_error(exc, request)
        return True
    return False


def task_error(exc: IcetailError | OSError | pa.ArrowException, request: SplitRequest) -> TaskErrorPayload:
    """What a task that failed reading `request` hands the driver: an IcetailError by class."""
    if isinstance(exc, IcetailError):
        return TaskErrorPayload(type(exc).__module__, type(exc).__name__, str(exc))
    path = request.split.task.data_file.path
    kind = storage_error_kind(exc, path) if isinstance(exc, OSError) else StorageErrorKind.OTHER
    if kind in (StorageErrorKind.DENIED, StorageErrorKind.TRANSIENT):  # mid-read: throttled, timed out
        error = storage_error(exc, "data file", path)
        return TaskErrorPayload(type(error).__module__, type(error).__name__, str(error))
    message = f"data file {path} cannot be read ({exc}); restore the file or skip its snapshot"
    return TaskErrorPayload(DataFileError.__module__, DataFileError.__name__, message)


def raise_task_error(error: TaskErrorPayload) -> None:
    """Raise, in the driver, the error a task handed over."""
    raise _rebuild_error(error.module, error.name, error.message)


def _staged(stager: ChunkStager, stage_as: SplitSlot, chunk: Chunk) -> Chunk:
    """Write the chunk's rows from this task; only where they went and their counts travel on."""
    if chunk.batch is None or chunk.batch.num_rows == 0:
        return chunk
    key = stage_as.chunk_key(chunk.split_id, chunk.row_start_inclusive)
    rows = pa.Table.from_batches([chunk.batch])
    # read_split counted the rows per change type already: they travel on in `change_counts`
    return replace(chunk, batch=None, staged=stager.stage(key, rows))


def _encode(chunk: Chunk, handoff: str | None = None) -> _ChunkPayload:
    """The chunk as a picklable payload: its rows as Arrow IPC bytes, or in a file under `handoff`.

    A chunk of one change type has the same four metadata values on every row (one split is one
    commit): they travel once, as values, and the driver repeats them (a quarter of the bytes).
    """
    if chunk.batch is None:
        return _ChunkPayload(chunk, b"", None)
    batch, constant = chunk.batch, None
    constants = constant_column_count(batch.schema)
    if len(chunk.change_counts) == 1 and batch.num_rows and constants:
        data_width = batch.num_columns - constants
        constant = tuple(_first_value(batch.column(data_width + i)) for i in range(constants))
        batch = batch.select(range(data_width))
    if handoff is not None:
        path = os.path.join(handoff, f"{uuid.uuid4().hex}.arrow")
        try:
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
                writer.write_batch(batch)
        except OSError as exc:  # the local disk, not the data file: say so (task_error keeps the class)
            with contextlib.suppress(OSError):
                os.unlink(path)
            if is_disk_full(exc):
                raise handoff_full(os.path.dirname(handoff)) from exc
            raise IcetailError(f"cannot write icetail's handoff file in {handoff}: {exc}") from exc
        return _ChunkPayload(replace(chunk, batch=None), path, constant)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return _ChunkPayload(replace(chunk, batch=None), sink.getvalue().to_pybytes(), constant)


def _first_value(column: pa.Array) -> Any:
    scalar = column[0]
    return scalar.value if isinstance(scalar, pa.TimestampScalar) else scalar.as_py()  # timestamps as int us


def _decode(payload: _Payload) -> Chunk:
    if isinstance(payload, TaskErrorPayload):
        raise _rebuild_error(payload.module, payload.name, payload.message)
    chunk, data, constant = payload.chunk, payload.data, payload.constant
    if not data:
        return chunk
    if isinstance(data, str):  # a handoff file: map it (no copy), then unlink it (the mapping stays)
        reader = pa.ipc.open_file(pa.memory_map(data))
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        os.unlink(data)
    else:
        batches = list(pa.ipc.open_stream(data))
    batch = batches[0] if batches else None
    if batch is not None and constant is not None:
        batch = with_constant_metadata(batch, constant)
    return replace(chunk, batch=batch)


def _rebuild_error(module: str, name: str, message: str) -> IcetailError:
    import importlib

    try:
        cls = getattr(importlib.import_module(module), name)
        return cls(message)
    except (ImportError, AttributeError, TypeError):
        return IcetailError(message)
