"""The benchmark runner: `python -m bench.run [--scale small|default|tiny] [--cases a,b,...]`.

Every case measures icetail through its real path (`Planner.plan` + `icetail.monitor.engine.api.iter_changes`
on a local-mode SparkSession, consuming the Arrow batches; or `Pipeline` / `icetail serve`) and
the baselines in the same run, and prints ratios `baseline seconds / icetail seconds` (so > 1
means icetail is faster). One SparkSession (the Java Iceberg reference's jars plus icetail's own
defaults) serves icetail and the Java baselines; its start-up and the first job (Python worker
start) are measured once and excluded from the throughput figures by a warm-up read.

Cases: append, mor, cow, planning, recovery, serve, memory (see bench/README.md).
Results: printed, and written as JSON to `<workdir>/results-<scale>-<utc time>.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `tests.support` is not an installed package
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402

CATALOG = "icebench"
ALL_CASES = ("append", "mor", "cow", "planning", "recovery", "serve", "memory", "delivered")
DEFAULT_WORKDIR = "/tmp/icetail-bench"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class Timing:
    seconds: float
    rows_in: int = 0  # data-file rows the reader had to consider
    rows_out: int = 0  # rows it returned
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows_in / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Goal:
    name: str
    target: str
    value: float | None
    met: bool | None  # None: not measured
    note: str = ""


@dataclass
class CaseResult:
    case: str
    timings: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end of the case


def tree_cpu_seconds() -> float:
    """User + system CPU of this process and all its live descendants (JVM, Python workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in [os.getpid(), *_children(os.getpid())]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / ticks


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of the Python driver (this process), the JVM and the Python workers."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"driver_python": 0.0, "jvm": 0.0, "python_workers": 0.0}
    me = os.getpid()
    for pid in [me, *_children(me)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            continue
        kind = "driver_python" if pid == me else ("jvm" if _rss_and_kind(pid)[1] == "jvm" else "python_workers")
        out[kind] += cpu
    return out


def timed(fn: Callable[[], Timing]) -> Timing:
    cpu = tree_cpu_seconds()
    timing = fn()
    timing.extra["cpu_s"] = round(tree_cpu_seconds() - cpu, 3)
    return timing


def _pick(runs: list[Timing]) -> Timing:
    chosen = min(runs, key=lambda t: t.seconds)
    chosen.extra["runs_s"] = [round(t.seconds, 4) for t in runs]
    chosen.extra["runs_cpu_s"] = [t.extra.get("cpu_s") for t in runs]
    return chosen


def best(fn: Callable[[], Timing], repeat: int) -> Timing:
    return _pick([timed(fn) for _ in range(max(repeat, 1))])


def interleaved(readers: dict[str, Callable[[], Timing] | None], repeat: int) -> dict[str, Timing]:
    """Run every reader once per round, `repeat` rounds, and keep each one's best run.

    Interleaving spreads the load of other processes on a shared machine over all readers alike.
    A reader given as None is skipped (`--skip-java`).
    """
    runs: dict[str, list[Timing]] = {name: [] for name, fn in readers.items() if fn is not None}
    for _ in range(max(repeat, 1)):
        for name, fn in readers.items():
            if fn is not None:
                runs[name].append(timed(fn))
    out = {name: _pick(r) for name, r in runs.items()}
    for name, fn in readers.items():
        if fn is None:
            out[name] = Timing(float("nan"), 0, 0, {"skipped": "--skip-java"})
    return out


def java(ctx: Context, fn: Callable[[], Timing]) -> Callable[[], Timing] | None:
    """A Java baseline, unless --skip-java (the smoke test) asked to leave them out."""
    return None if ctx.args.skip_java else fn


def ratio(baseline: Timing | float, icetail: Timing | float) -> float:
    b = baseline.seconds if isinstance(baseline, Timing) else baseline
    i = icetail.seconds if isinstance(icetail, Timing) else icetail
    return round(b / i, 3) if i > 0 else float("inf")


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    import pyarrow
    import pyiceberg
    import pyspark

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    return {
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "git_dirty_code": git("status", "--porcelain", "--", "monitor", "reader", "state") or "clean",
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu": cpu,
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "pyiceberg": pyiceberg.__version__,
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.run", *sys.argv[1:]]),
    }


# --------------------------------------------------------------------------------------------
# Session and catalog
# --------------------------------------------------------------------------------------------


def catalog_paths(workdir: Path, sub: str = "catalog") -> tuple[Path, Path, Path]:
    root = workdir / sub
    return root, (root / "catalog.db").resolve(), (root / "warehouse").resolve()


def catalog_env(workdir: Path, sub: str = "catalog") -> dict[str, str]:
    """PYICEBERG_* variables for the bench catalog (pyiceberg reads them when it is first imported)."""
    _, db, warehouse = catalog_paths(workdir, sub)
    key = CATALOG.upper()
    return {
        f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
        f"PYICEBERG_CATALOG__{key}__URI": f"sqlite:///{db}",
        f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{warehouse}",
    }


def bench_spark_conf(driver_memory: str) -> dict[str, str]:
    """tests/support/javaref's session plus icetail's defaults, with the JIT left at full strength."""
    from icetail.reader.spark import DEFAULT_CONF
    from tests.support.javaref import spark_conf

    conf = {**spark_conf(), **DEFAULT_CONF}
    # what reader.spark.spark_session adds for a local master (the production path), when present
    import importlib.util

    if importlib.util.find_spec("icetail.reader.spark_daemon") is not None:
        conf["spark.python.daemon.module"] = "icetail.reader.spark_daemon"
    conf.update(
        {
            "spark.master": f"local[{os.cpu_count() or 2}]",
            "spark.app.name": "icetail-bench",
            "spark.driver.memory": driver_memory,
            "spark.sql.shuffle.partitions": str(os.cpu_count() or 2),
            "spark.default.parallelism": str(os.cpu_count() or 2),
            # javaref's -XX:TieredStopAtLevel=1 (C1 only) would handicap the Java reader
            "spark.driver.extraJavaOptions": DEFAULT_CONF["spark.driver.extraJavaOptions"] + " -XX:+UseParallelGC",
        }
    )
    return conf


def start_session(driver_memory: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in bench_spark_conf(driver_memory).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --------------------------------------------------------------------------------------------
# Readers: icetail and the baselines
# --------------------------------------------------------------------------------------------


def read_icetail(table: Any, from_id: int | None, to_id: int, spark: Any, **options: Any) -> Timing:
    """icetail's read of (from, to], every row returned to the driver (`iter_changes`)."""
    from icetail.monitor.engine.api import iter_changes

    return _timed_plan(
        table, from_id, to_id, lambda plan: sum(b.num_rows for b in iter_changes(table, plan, spark=spark, **options))
    )


def read_icetail_in_tasks(table: Any, from_id: int | None, to_id: int, spark: Any) -> Timing:
    """icetail's read with the rows dropped inside the Spark tasks (icetail.sinks.discard).

    The path of the staging sinks (parquet, Iceberg), minus their writes; the Java baselines
    also drop their rows in the tasks (Spark's `noop` sink). Nothing is reconciled, so use it
    only where reconciling changes nothing (appends, deletes); the cases check the row counts.
    """
    timing = _timed_plan(table, from_id, to_id, lambda plan: rows_dropped_in_tasks(table, plan, spark))
    timing.extra["rows"] = "dropped in the tasks"
    return timing


def _timed_plan(table: Any, from_id: int | None, to_id: int, read: Callable[[Any], int]) -> Timing:
    """Plan (from, to] and `read` the plan; the time of both, planning also on its own."""
    from icetail.monitor.planning.planner import Planner

    started = time.perf_counter()
    plan = Planner(table).plan(from_id, to_id)
    planned = time.perf_counter()
    out = read(plan)
    seconds = time.perf_counter() - started
    rows_in = sum(t.data_file.record_count for t in plan.tasks)
    return Timing(
        seconds,
        rows_in,
        out,
        {"plan_s": round(planned - started, 4), "splits": len(plan.splits), "tasks": len(plan.tasks)},
    )


def rows_dropped_in_tasks(table: Any, plan: Any, spark: Any) -> int:
    """Run `plan` on Spark with a stager that drops every chunk's rows; the change rows counted."""
    from icetail.monitor.engine.api import read_context
    from icetail.reader.spark import SplitRequest, run_splits
    from icetail.sinks.discard import DiscardStager

    context = read_context(table, plan.schema_id, plan.tasks)
    requests = [SplitRequest(split, 0, ("bench", "tasks", i)) for i, split in enumerate(plan.splits)]
    return sum(chunk.row_count for chunk in run_splits(spark, context, requests, stager=DiscardStager()))


def read_splits_inprocess(table: Any, from_id: int | None, to_id: int, *, encode: bool = False) -> Timing:
    """Diagnostic: icetail's split reader run in this process, one split after another (no Spark).

    With `encode`, each chunk also makes the Arrow IPC round trip the Spark path makes.
    """
    from icetail.monitor.engine.api import read_context
    from icetail.reader.spark import _decode, _encode
    from icetail.reader.split_reader import read_split

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        out = 0
        for split in plan.splits:
            for chunk in read_split(context, split):
                if encode:
                    chunk = _decode(_encode(chunk))
                out += chunk.batch.num_rows if chunk.batch is not None else 0
        return out

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["encode"] = encode
    return timing


def _pool_split(context: Any, split: Any) -> list[Any]:
    from icetail.reader.spark import _encode
    from icetail.reader.split_reader import read_split

    return [_encode(chunk) for chunk in read_split(context, split)]


def read_pool(table: Any, from_id: int | None, to_id: int, executor: Any) -> Timing:
    """Experiment (P1 option 3): the split reader in a local process pool, in plan order, no Spark."""
    from icetail.monitor.engine.api import read_context
    from icetail.reader.spark import _decode

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        out = 0
        for payloads in executor.map(_pool_split, [context] * len(plan.splits), plan.splits):
            for payload in payloads:
                chunk = _decode(payload)
                out += chunk.batch.num_rows if chunk.batch is not None else 0
        return out

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["mode"] = "pool"
    return timing


def _thread_split(context: Any, split: Any) -> list[Any]:
    from icetail.reader.split_reader import read_split

    return list(read_split(context, split))


def read_threads(table: Any, from_id: int | None, to_id: int, executor: Any) -> Timing:
    """Experiment (P1 option 3, zero-copy): the split reader on a thread pool in the driver, plan order."""
    from icetail.monitor.engine.api import read_context

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        chunk_lists = executor.map(_thread_split, [context] * len(plan.splits), plan.splits)
        return sum(c.batch.num_rows for chunks in chunk_lists for c in chunks if c.batch is not None)

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["mode"] = "threads"
    return timing


def read_raw(paths: Iterable[str], *, threads: bool = True) -> Timing:
    """pyarrow decode of whole files, every column: the limit on this machine."""
    import pyarrow.parquet as pq

    paths = list(paths)
    started = time.perf_counter()
    rows = 0
    for path in paths:
        rows += pq.read_table(gen.local_path(path), use_threads=threads).num_rows
    return Timing(time.perf_counter() - started, rows, rows, {"files": len(paths), "threads": threads})


def read_pyiceberg(table: Any, snapshot_id: int) -> Timing:
    started = time.perf_counter()
    rows = 0
    for batch in table.scan(snapshot_id=snapshot_id).to_arrow_batch_reader():
        rows += batch.num_rows
    return Timing(time.perf_counter() - started, rows, rows)


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def read_java_incremental(spark: Any, fq: str, start_exclusive: int, end_inclusive: int, rows: int) -> Timing:
    """Java Iceberg's incremental append scan, every column decoded into Spark rows (noop sink)."""
    started = time.perf_counter()
    df = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(start_exclusive))
        .option("end-snapshot-id", str(end_inclusive))
        .load(fq)
    )
    _noop(df)
    return Timing(time.perf_counter() - started, rows, rows)


def read_java_snapshot(spark: Any, fq: str, snapshot_id: int, rows: int) -> Timing:
    started = time.perf_counter()
    _noop(spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(fq))
    return Timing(time.perf_counter() - started, rows, rows)


def read_java_changelog(catalog: Any, name: str, start_exclusive: int, end_inclusive: int, rows: int) -> Timing:
    """Java's create_changelog_view (carry-over rows removed) over (start, end], read to a noop sink."""
    view = f"bench_changes_{int(time.time() * 1000)}"
    started = time.perf_counter()
    catalog.sql(
        f"CALL {{cat}}.system.create_changelog_view(table => '{catalog.ident(name)}', changelog_view => '{view}', "
        f"options => map('start-snapshot-id', '{start_exclusive}', 'end-snapshot-id', '{end_inclusive}'))"
    ).collect()
    try:
        _noop(catalog.spark.table(view))
        out = catalog.spark.table(view).count() if rows < 5_000_000 else -1
    finally:
        catalog.spark.catalog.dropTempView(view)
    # the count is a second pass; keep it out of the time
    return Timing(time.perf_counter() - started, rows, out)


def snapshot_data_files(table: Any, snapshot_id: int) -> list[str]:
    return [t.file.file_path for t in table.scan(snapshot_id=snapshot_id).plan_files()]


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclass
class Context:
    args: argparse.Namespace
    scale: gen.Scale
    workdir: Path
    data: gen.DataSet
    catalog: Any
    spark: Any
    startup: dict[str, float]


def case_append(ctx: Context) -> CaseResult:
    result = CaseResult("append")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "append")
    seed = gen.seed_snapshot(cat, "append", ctx.data)
    snaps = gen.load_files(cat, "append", ctx.data.files, scale.files_per_snapshot)
    table = cat.load_table("append")
    result.notes.append(f"{len(ctx.data.files)} files in {len(snaps)} append snapshots after a 10-row seed snapshot")
    # warm-up of both engines on the first added snapshot (Python workers, JIT, file cache)
    read_icetail(table, seed, snaps[0], ctx.spark)
    read_icetail_in_tasks(table, seed, snaps[0], ctx.spark)
    if not ctx.args.skip_java:
        read_java_incremental(ctx.spark, cat.fq("append"), seed, snaps[0], 0)
    t = interleaved(
        {
            "icetail": lambda: read_icetail_in_tasks(table, seed, snaps[-1], ctx.spark),
            "icetail_to_driver": lambda: read_icetail(table, seed, snaps[-1], ctx.spark),
            "raw_pyarrow": lambda: read_raw(ctx.data.files),
            "raw_pyarrow_1thread": lambda: read_raw(ctx.data.files, threads=False),
            "pyiceberg_scan": lambda: read_pyiceberg(table, snaps[-1]),
            "java_incremental": java(
                ctx, lambda: read_java_incremental(ctx.spark, cat.fq("append"), seed, snaps[-1], scale.rows)
            ),
            "diag_split_reader_no_spark": lambda: read_splits_inprocess(table, seed, snaps[-1]),
            "diag_split_reader_ipc_no_spark": lambda: read_splits_inprocess(table, seed, snaps[-1], encode=True),
        },
        scale.repeat,
    )
    icetail, raw, raw1, pyice, java_t, inproc = (
        t["icetail"],
        t["raw_pyarrow"],
        t["raw_pyarrow_1thread"],
        t["pyiceberg_scan"],
        t["java_incremental"],
        t["diag_split_reader_no_spark"],
    )
    assert icetail.rows_out == ctx.scale.rows, (icetail.rows_out, ctx.scale.rows)
    assert t["icetail_to_driver"].rows_out == ctx.scale.rows, (t["icetail_to_driver"].rows_out, ctx.scale.rows)
    result.timings = dict(t)
    result.notes.append(
        "icetail: rows dropped in the Spark tasks (the staging sinks' path; Java's baseline uses the noop sink); "
        "icetail_to_driver: every row returned to the driver as Arrow (iter_changes)"
    )
    result.ratios = {
        "vs_raw_pyarrow": ratio(raw, icetail),
        "to_driver/vs_raw_pyarrow": ratio(raw, t["icetail_to_driver"]),
        "to_driver/vs_java_incremental": ratio(java_t, t["icetail_to_driver"]),
        "vs_raw_pyarrow_1thread": ratio(raw1, icetail),
        "vs_pyiceberg_scan": ratio(pyice, icetail),
        "vs_java_incremental": ratio(java_t, icetail),
        "cpu/vs_raw_pyarrow": ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"]),
        "diag_raw_1thread_vs_split_reader_no_spark": ratio(raw1, inproc),
    }
    r, j = result.ratios["vs_raw_pyarrow"], result.ratios["vs_java_incremental"]
    result.goals = [
        Goal("append-only read vs raw pyarrow decode", ">= 0.8x", r, r >= 0.8),
        Goal("append-only read vs Java Iceberg Spark read", ">= 1.5x", j, j >= 1.5 if j == j else None),
    ]
    return result


def _mor_table(ctx: Context, name: str, *, format_version: int) -> tuple[int, int]:
    """A table with the whole data set in one snapshot after the seed; returns (seed, data snapshot)."""
    gen.create_table(ctx.catalog, name)
    seed = gen.seed_snapshot(ctx.catalog, name, ctx.data)
    data = gen.add_files(ctx.catalog, name, ctx.data.files)
    if format_version == 3:
        gen.upgrade_to_v3(ctx.catalog, name)
    return seed, data


def _delete_kinds(table: Any, from_id: int, to_id: int) -> dict[str, int]:
    """Delete files added by the snapshot, by kind (from icetail's plan: pyiceberg refuses equality deletes)."""
    from icetail.monitor.planning.planner import Planner

    files = {d.path: d for t in Planner(table).plan(from_id, to_id).tasks for d in t.deletes_after}
    kinds: dict[str, int] = {}
    for d in files.values():
        key = f"{d.content.name.lower()}/{d.file_format.lower()}"
        kinds[key] = kinds.get(key, 0) + 1
    return kinds


def case_mor(ctx: Context) -> CaseResult:
    result = CaseResult("mor")
    cat, scale = ctx.catalog, ctx.scale
    variants = [
        ("pos_v2", 2, "10% position deletes (v2, Spark SQL DELETE merge-on-read)", 0.7),
        ("dv_v3", 3, "10% deletion vectors (v3, Spark SQL DELETE merge-on-read)", 0.7),
        ("eq_v2", 2, "1% equality deletes on id (v2, Java RowDelta)", 0.5),
    ]
    for name, version, label, target in variants:
        log(f"  mor/{name}: building")
        _, data_snapshot = _mor_table(ctx, name, format_version=version)
        if name == "eq_v2":
            import numpy as np

            ids = np.arange(0, scale.rows, dtype=np.int64)
            delete_snapshot = gen.commit_equality_deletes(cat, name, ids[ids % 100 == 13])
            expected = int((ids % 100 == 13).sum())
        else:
            delete_snapshot = gen.spark_delete(cat, name, "id % 10 = 7")
            expected = scale.rows // 10
        table = cat.load_table(name)
        kinds = _delete_kinds(table, data_snapshot, delete_snapshot)
        log(f"  mor/{name}: measuring (delete files {kinds})")
        read_icetail(table, data_snapshot, delete_snapshot, ctx.spark)  # warm-up: page cache, delete cache
        read_icetail_in_tasks(table, data_snapshot, delete_snapshot, ctx.spark)
        live = scale.rows - expected
        t = interleaved(
            {
                "icetail": lambda t=table, a=data_snapshot, b=delete_snapshot: read_icetail_in_tasks(
                    t, a, b, ctx.spark
                ),
                "icetail_to_driver": lambda t=table, a=data_snapshot, b=delete_snapshot: read_icetail(
                    t, a, b, ctx.spark
                ),
                "raw_pyarrow": lambda: read_raw(ctx.data.files),
                "java_snapshot": java(
                    ctx, lambda n=name, s=delete_snapshot, r=live: read_java_snapshot(ctx.spark, cat.fq(n), s, r)
                ),
            },
            scale.repeat,
        )
        icetail, raw, java_t = t["icetail"], t["raw_pyarrow"], t["java_snapshot"]
        for reader in ("icetail", "icetail_to_driver"):
            if t[reader].rows_out != expected:
                result.notes.append(f"{name}: {reader} returned {t[reader].rows_out} rows, expected {expected}")
        icetail.extra["delete_files"] = kinds
        result.timings[f"{name}/icetail"] = icetail
        result.timings[f"{name}/icetail_to_driver"] = t["icetail_to_driver"]
        result.ratios[f"{name}/to_driver/vs_raw_pyarrow"] = ratio(raw, t["icetail_to_driver"])
        result.timings[f"{name}/raw_pyarrow"] = raw
        result.timings[f"{name}/java_snapshot"] = java_t
        value = ratio(raw, icetail)
        result.ratios[f"{name}/vs_raw_pyarrow"] = value
        result.ratios[f"{name}/vs_java_snapshot"] = ratio(java_t, icetail)
        result.ratios[f"{name}/cpu/vs_raw_pyarrow"] = ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"])
        goal_target = f">= {target}x" + ("" if name != "dv_v3" else " (same bar as v2 position deletes)")
        result.goals.append(Goal(f"{label} vs raw decode", goal_target, value, value >= target))
    return result


def case_cow(ctx: Context) -> CaseResult:
    result = CaseResult("cow")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "cow", mode="copy-on-write")
    gen.seed_snapshot(cat, "cow", ctx.data)
    data_snapshot = gen.add_files(cat, "cow", ctx.data.files)
    cutoff = scale.cow_files * scale.rows_per_file
    snapshot = gen.spark_delete(cat, "cow", f"id % 10 = 7 AND id >= 0 AND id < {cutoff}")
    table = cat.load_table("cow")
    from icetail.monitor.planning.planner import Planner

    plan = Planner(table).plan(data_snapshot, snapshot)
    touched = sorted({t.data_file.path for t in plan.tasks})
    rows_in = sum(t.data_file.record_count for t in plan.tasks)
    result.notes.append(
        f"DELETE of 10% of the rows of {scale.cow_files} files ({cutoff:,} rows) rewrote them: "
        f"{sum(t.kind.name == 'REMOVED' for t in plan.tasks)} removed + "
        f"{sum(t.kind.name == 'ADDED' for t in plan.tasks)} added files, {rows_in:,} rows to read, "
        "90% of them carry-overs"
    )
    read_icetail(table, data_snapshot, snapshot, ctx.spark)
    t = interleaved(
        {
            "icetail": lambda: read_icetail(table, data_snapshot, snapshot, ctx.spark),
            "raw_pyarrow": lambda: read_raw(touched),
            "java_changelog": java(ctx, lambda: read_java_changelog(cat, "cow", data_snapshot, snapshot, rows_in)),
        },
        scale.repeat,
    )
    icetail, raw, java_t = t["icetail"], t["raw_pyarrow"], t["java_changelog"]
    expected = cutoff // 10
    if icetail.rows_out != expected:
        result.notes.append(f"icetail returned {icetail.rows_out} rows, expected {expected} DELETEs")
    if java_t.rows_out not in (-1, 0, expected):
        result.notes.append(f"Java changelog returned {java_t.rows_out} rows, expected {expected}")
    result.timings = dict(t)
    result.ratios = {
        "vs_raw_pyarrow": ratio(raw, icetail),
        "vs_java_changelog": ratio(java_t, icetail),
        "cpu/vs_raw_pyarrow": ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"]),
    }
    return result


def case_planning(ctx: Context) -> CaseResult:
    from icetail.monitor.planning.planner import Planner

    result = CaseResult("planning")
    cat, scale = ctx.catalog, ctx.scale
    reps = 200 if scale.name != "tiny" else 3
    full_reps = 5 if scale.name != "tiny" else 1
    per_history: dict[int, dict[str, Any]] = {}
    built: dict[int, tuple[str, Any, int, int, float]] = {}
    for history in scale.history:
        name = f"hist{history}"
        log(f"  planning: building {name} ({history} snapshots, {scale.history_entries} entries)")
        started = time.perf_counter()
        table = gen.build_history(cat, name, history, scale.history_entries, log=log)
        parent = table.current_snapshot().snapshot_id
        location = gen.local_path(table.location())
        gen.fast_append_fake(
            table, [f"file://{location}/data/new-{j:03d}.parquet" for j in range(scale.new_snapshot_files)]
        )
        table = cat.load_table(name)
        built[history] = (name, table, parent, table.current_snapshot().snapshot_id, time.perf_counter() - started)
    # every history planned once per round, round after round: other processes' load hits all alike
    ice_times: dict[int, list[float]] = {h: [] for h in built}
    manifests_read: dict[int, int] = {}
    for _ in range(reps):
        for history, (_, table, parent, new, _) in built.items():
            t0 = time.perf_counter()
            plan = Planner(table).plan(parent, new)  # a fresh Planner each time: nothing cached
            ice_times[history].append(time.perf_counter() - t0)
            manifests_read[history] = plan.manifests_read
            assert len(plan.tasks) == scale.new_snapshot_files
    for history, (name, table, _parent, new, build_s) in built.items():
        full_times, full_files = [], 0
        for _ in range(full_reps):  # a freshly loaded table each time: pyiceberg's caches are per FileIO
            fresh = cat.load_table(name)
            t0 = time.perf_counter()
            full_files = len(list(fresh.scan(snapshot_id=new).plan_files()))
            full_times.append(time.perf_counter() - t0)
        times = ice_times[history]
        ice, full = statistics.median(times), statistics.median(full_times)
        manifests = len(table.current_snapshot().manifests(table.io))
        per_history[history] = {
            "icetail_plan_s": round(ice, 5),
            "icetail_plan_min_s": round(min(times), 5),
            "icetail_plan_p95_s": round(sorted(times)[int(0.95 * (len(times) - 1))], 5),
            "icetail_manifests_read": manifests_read[history],
            "pyiceberg_full_plan_s": round(full, 5),
            "pyiceberg_full_files": full_files,
            "manifests_in_list": manifests,
            "build_s": round(build_s, 1),
        }
        result.ratios[f"h{history}/full_vs_icetail"] = ratio(full, ice)
    result.timings = {f"history_{h}": v for h, v in per_history.items()}
    lo, hi = min(scale.history), max(scale.history)
    growth = round(per_history[hi]["icetail_plan_s"] / per_history[lo]["icetail_plan_s"], 3)
    result.ratios[f"icetail_h{hi}_vs_h{lo}"] = growth
    # the minimum of the repetitions is the estimate least disturbed by other processes
    result.ratios[f"icetail_h{hi}_vs_h{lo}_min"] = round(
        per_history[hi]["icetail_plan_min_s"] / per_history[lo]["icetail_plan_min_s"], 3
    )
    cheaper = result.ratios[f"h{hi}/full_vs_icetail"]
    result.goals = [
        Goal(f"planning 1 new snapshot at {hi} vs {lo} snapshots of history", "<= 1.5x", growth, growth <= 1.5),
        Goal(
            f"planning 1 new snapshot vs pyiceberg full-scan plan (at {hi})", ">= 20x cheaper", cheaper, cheaper >= 20
        ),
    ]
    return result


class _FailingSink:
    """Delivers `fail_at - 1` chunks, then raises (a kill between sink write and offset commit)."""

    exactly_once = True

    def __init__(self, fail_at: int | None) -> None:
        self.fail_at = fail_at
        self.writes = 0
        self.rows = 0

    def write(self, key: Any, rows: Any) -> str:
        self.writes += 1
        if self.fail_at is not None and self.writes >= self.fail_at:
            raise RuntimeError(f"injected crash at chunk {self.writes}")
        self.rows += rows.num_rows
        return key.name

    def close(self) -> None:
        pass


def case_recovery(ctx: Context) -> CaseResult:
    from icetail.kernel.errors import IcetailError
    from icetail.monitor.engine.pipeline import Pipeline, PipelineConfig

    result = CaseResult("recovery")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "big")
    seed = gen.seed_snapshot(cat, "big", ctx.data)
    gen.add_files(cat, "big", [ctx.data.big_file])
    n, rg = ctx.data.big_file_rows, scale.row_group_rows
    result.notes.append(f"one file of {n:,} rows in {scale.big_file_row_groups} row groups of {rg:,}")
    variants: list[tuple[str, int | None]] = [("chunk=row group", None), ("chunk=row group/4", max(rg // 4, 1))]
    worst_ok = True
    for label, chunk_rows in variants:
        chunk = chunk_rows or rg
        total_chunks = -(-n // chunk)
        # committed chunks before the crash: half way, and for sub-row-group chunks 3 chunks into a row group
        committed = total_chunks // 2 if chunk_rows is None else (total_chunks // 2) // 4 * 4 + 3
        state = ctx.workdir / f"state-recovery-{chunk}.db"
        state.unlink(missing_ok=True)
        config = PipelineConfig(
            catalog=CATALOG,
            table=cat.ident("big"),
            state_url=f"sqlite:///{state}",
            sink_url="parquet:///unused",
            consumer=f"bench-recovery-{chunk}",
            start=f"snapshot:{seed}",
            chunk_rows=chunk_rows,
        )
        crashing = _FailingSink(committed + 1)
        t0 = time.perf_counter()
        with Pipeline(config, sink=crashing, spark=ctx.spark) as pipeline:  # type: ignore[arg-type]
            try:
                pipeline.run_batch()
                raise AssertionError("the injected crash did not happen")
            except (IcetailError, RuntimeError):
                pass
            checkpoint = pipeline.checkpoint()
        crash_s = time.perf_counter() - t0
        assert checkpoint is not None and checkpoint.inflight is not None
        offset = max((p.next_row_exclusive or 0) for p in checkpoint.inflight.progress)
        resumed_sink = _FailingSink(None)
        t0 = time.perf_counter()
        with Pipeline(config, sink=resumed_sink, spark=ctx.spark) as pipeline:  # type: ignore[arg-type]
            outcome = pipeline.run_batch()
        resume_s = time.perf_counter() - t0
        assert outcome is not None and outcome.resumed and outcome.completed
        delivered = crashing.rows + resumed_sink.rows
        uncommitted = n - offset
        # rows decoded again = what the resumed run decoded beyond the uncommitted rows, plus the chunk
        # that was in flight at the crash (decoded and lost once already)
        in_flight = min(chunk, uncommitted)
        reread = outcome.rows_decoded - uncommitted + in_flight
        chunks_reread = round(reread / chunk, 2)
        ok = chunks_reread <= 1.0
        worst_ok = worst_ok and ok
        result.timings[label] = {
            "chunk_rows": chunk,
            "committed_offset": offset,
            "rows_decoded_on_resume": outcome.rows_decoded,
            "uncommitted_rows": uncommitted,
            "rows_reread": reread,
            "chunks_reread": chunks_reread,
            "rows_delivered_total": delivered,
            "crash_run_s": round(crash_s, 2),
            "resume_run_s": round(resume_s, 2),
        }
        if delivered != n:
            result.notes.append(f"{label}: delivered {delivered} rows in all, expected {n}")
        result.goals.append(Goal(f"recovery re-reads at most one chunk ({label})", "<= 1 chunk", chunks_reread, ok))
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case_serve(ctx: Context) -> CaseResult:
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    result = CaseResult("serve")
    cat, scale = ctx.catalog, ctx.scale
    interval = ctx.args.serve_interval
    table = gen.create_table(cat, "serve")
    schema = gen.arrow_schema()

    def commit(i: int) -> tuple[int, float]:
        rows = gen._rows(schema, ctx.args.seed, 50_000_000 + i, 1_000_000_000 + i * 1000, 100)
        table.append(rows)
        return int(table.current_snapshot().snapshot_id), time.time()

    first, _ = commit(-1)  # a first snapshot; serve starts after it (whenever its consumer is created)
    sink = ctx.workdir / "serve-sink"
    shutil.rmtree(sink, ignore_errors=True)
    state = ctx.workdir / "state-serve.db"
    state.unlink(missing_ok=True)
    port = _free_port()
    env = {**os.environ, **catalog_env(ctx.workdir), "PYSPARK_PYTHON": sys.executable}
    cmd = [
        str(Path(sys.executable).parent / "icetail"),
        "serve",
        "--catalog", CATALOG,
        "--table", cat.ident("serve"),
        "--state", f"sqlite:///{state}",
        "--sink", f"parquet://{sink}",
        "--start", f"snapshot:{first}",
        "--interval", f"{interval}s",
        "--metrics-host", "127.0.0.1",
        "--metrics-port", str(port),
        "--log-level", "WARNING",
    ]  # fmt: skip
    log_path = ctx.workdir / "serve.log"
    seen: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        known: set[str] = set()
        while not stop.is_set():
            if sink.exists():
                for path in sorted(sink.glob("*.parquet")):
                    if path.name in known:
                        continue
                    known.add(path.name)
                    now = time.time()
                    try:
                        ids = pq.read_table(path, columns=["_commit_snapshot_id"]).column(0)
                    except (OSError, pa.ArrowException):
                        known.discard(path.name)
                        continue
                    for sid in set(ids.to_pylist()):
                        seen.setdefault(int(sid), now)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ctx.workdir)
    try:
        rng = random.Random(ctx.args.seed)
        warm, _ = commit(0)  # includes the service's Spark start-up: not counted
        deadline = time.time() + 180
        while warm not in seen:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"icetail serve did not deliver the warm-up snapshot; see {log_path}")
            time.sleep(0.05)
        first_s = time.perf_counter() - started
        commits: dict[int, float] = {}
        for i in range(1, scale.serve_commits + 1):
            time.sleep(rng.uniform(0.0, interval))  # commits land at random points of the poll cycle
            sid, at = commit(i)
            commits[sid] = at
            while sid not in seen and proc.poll() is None:  # one commit in flight at a time
                if time.time() > at + 60:
                    raise RuntimeError(f"snapshot {sid} not delivered within 60 s; see {log_path}")
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        stop.set()
        watcher.join(timeout=5)
    latencies = sorted(seen[s] - at for s, at in commits.items() if s in seen)
    p = lambda q: latencies[min(int(round(q * (len(latencies) - 1))), len(latencies) - 1)]  # noqa: E731
    result.timings = {
        "poll_interval_s": interval,
        "commits": len(commits),
        "delivered": len(latencies),
        "p50_s": round(p(0.5), 3),
        "p95_s": round(p(0.95), 3),
        "max_s": round(latencies[-1], 3),
        "min_s": round(latencies[0], 3),
        "startup_to_first_delivery_s": round(first_s, 1),
    }
    result.ratios = {
        "p50_over_interval": round(p(0.5) / interval, 3),
        "p95_over_interval": round(p(0.95) / interval, 3),
    }
    result.notes.append(
        "latency = first sight of the snapshot's rows in the parquet sink (10 ms polling) - return of the "
        "pyiceberg commit; 100-row appends, one in flight at a time, each after a random 0..interval pause"
    )
    return result


# --------------------------------------------------------------------------------------------
# Memory: one fresh process per snapshot size, RSS of its whole tree sampled every 20 ms
# --------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - the process went away
        return []
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                found.extend(kids)
                todo.extend(kids)
        except OSError:
            continue
    return found


def _rss_and_kind(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return 0, "gone"
    return rss, "jvm" if cmd.endswith("java") else "python"


class RssSampler:
    """Peak RSS of this process (the Python driver), the JVM, and the Python workers, summed per kind."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = {"driver_python": 0, "jvm": 0, "python_workers": 0, "total": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        me = os.getpid()
        now = {"driver_python": _rss_and_kind(me)[0], "jvm": 0, "python_workers": 0}
        for pid in _children(me):
            rss, kind = _rss_and_kind(pid)
            now["jvm" if kind == "jvm" else "python_workers"] += rss if kind != "gone" else 0
        now["total"] = sum(now.values())
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)


def memprobe(args: argparse.Namespace) -> int:
    """Child process: read (from, to] of one table with icetail's own session.

    By default the rows are dropped in the Spark tasks (the staging sinks' path); with
    `--to-driver` every row comes back to the driver through iter_changes.
    """
    from icetail.monitor.engine.api import iter_changes
    from icetail.monitor.engine.catalog import load_table, open_catalog
    from icetail.monitor.planning.planner import Planner
    from icetail.reader.spark import spark_session

    with RssSampler() as sampler:
        spark = spark_session()
        spark.sparkContext.parallelize([0], 1).count()  # JVM and one worker up before the baseline sample
        sampler.sample()
        idle = dict(sampler.peak)
        table = load_table(open_catalog(CATALOG), args.table)
        plan = Planner(table).plan(args.from_snapshot, args.to_snapshot)
        rows = 0
        started = time.perf_counter()
        if args.to_driver:
            for batch in iter_changes(table, plan, spark=spark):
                rows += batch.num_rows
        else:
            rows = rows_dropped_in_tasks(table, plan, spark)
        seconds = time.perf_counter() - started
    print(json.dumps({"rows": rows, "seconds": seconds, "peak": sampler.peak, "idle": idle}))
    return 0


def case_memory(ctx: Context) -> CaseResult:
    result = CaseResult("memory")
    cat, scale = ctx.catalog, ctx.scale
    files = ctx.data.files
    # at least 2 files: with 1 file only one Python worker runs, which would look like growth later
    sizes = sorted({max(2, len(files) // 8), max(2, len(files) // 2), len(files)})
    mib = 1024 * 1024
    peaks: dict[str, Any] = {}
    tables = {}
    for count in sizes:
        name = f"mem{count}"
        gen.create_table(cat, name)
        seed = gen.seed_snapshot(cat, name, ctx.data)
        tables[count] = (name, seed, gen.add_files(cat, name, files[:count]))
    for mode, count in [(m, c) for m in ("to_driver", "tasks") for c in sizes]:
        name, seed, snapshot = tables[count]
        rows = sum(ctx.data.rows_per_file[:count])
        log(f"  memory ({mode}): snapshot of {count} files ({rows:,} rows) in a fresh process")
        env = {**os.environ, **catalog_env(ctx.workdir)}
        cmd = [sys.executable, "-m", "bench.run", "--workdir", str(ctx.workdir), "memprobe",
               "--table", cat.ident(name), "--from-snapshot", str(seed), "--to-snapshot", str(snapshot)]  # fmt: skip
        if mode == "to_driver":
            cmd.append("--to-driver")
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            err = ctx.workdir / f"memprobe-{name}.err"
            err.write_text(done.stderr)
            causes = [line.strip() for line in done.stderr.splitlines() if "Error" in line or "Exception:" in line]
            raise RuntimeError(f"memprobe of {count} files failed ({err}): {' | '.join(causes[:3])[:1500]}")
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        assert probe["rows"] == rows, (probe["rows"], rows)
        peaks[f"{mode}/{rows}_rows"] = {
            "files": count,
            "rows": rows,
            "seconds": round(probe["seconds"], 2),
            **{f"peak_{k}_mib": round(v / mib) for k, v in probe["peak"].items()},
            **{f"idle_{k}_mib": round(v / mib) for k, v in probe["idle"].items()},
        }
    result.timings = peaks
    smallest = sum(ctx.data.rows_per_file[: sizes[0]])
    for mode in ("tasks", "to_driver"):
        first, last = peaks[f"{mode}/{smallest}_rows"], peaks[f"{mode}/{scale.rows}_rows"]
        growth = round(last["peak_total_mib"] / max(first["peak_total_mib"], 1), 3)
        python_first = first["peak_driver_python_mib"] + first["peak_python_workers_mib"]
        python_last = last["peak_driver_python_mib"] + last["peak_python_workers_mib"]
        prefix = "" if mode == "tasks" else "to_driver/"
        result.ratios[f"{prefix}peak_total_largest_vs_smallest"] = growth
        result.ratios[f"{prefix}peak_python_largest_vs_smallest"] = round(python_last / max(python_first, 1), 3)
        label = "rows dropped in the tasks" if mode == "tasks" else "rows returned to the driver"
        result.goals.append(
            Goal(
                f"peak memory flat from {sizes[0]} to {sizes[-1]} files ({len(files) // sizes[0]}x the rows), {label}",
                "<= 1.25x",
                growth,
                growth <= 1.25,
            )
        )
    return result


def profile_target(args: argparse.Namespace, scale: gen.Scale) -> int:
    """`profile`: the append read of the main data set, `--iterations` times, for py-spy / pyinstrument.

    Uses icetail's own session (`icetail.reader.spark.spark_session`, no Java Iceberg jars) and its own
    catalog under `<workdir>/profile-catalog`, so it can run beside nothing else.
    """
    from pyiceberg.catalog import load_catalog

    from icetail.reader.spark import spark_session

    workdir = Path(args.workdir).resolve()
    data = gen.generate(workdir, scale, args.seed, log=log)
    root, _, _ = catalog_paths(workdir, "profile-catalog")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    catalog = load_catalog(CATALOG)
    catalog.create_namespace("ns")

    tables = gen.PyicebergTables(catalog)
    gen.create_table(tables, "prof")
    seed = gen.seed_snapshot(tables, "prof", data)
    last = gen.add_files(tables, "prof", data.files)
    table = tables.load_table("prof")
    fast = ("ICETAIL_BENCH_FAST_METADATA", "ICETAIL_BENCH_FAST_INSERTS")
    if any(os.environ.get(name) == "1" for name in fast) and args.mode != "spark":
        import bench.cases.fastdaemon  # noqa: F401 - applies the experiment's patches in this process
    if args.mode == "inprocess":
        read = lambda: read_splits_inprocess(table, seed, last, encode=True)  # noqa: E731
    elif args.mode == "threads":
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(os.cpu_count() or 2)
        read = lambda: read_threads(table, seed, last, pool)  # noqa: E731
    elif args.mode == "pool":
        from concurrent.futures import ProcessPoolExecutor

        executor = ProcessPoolExecutor(os.cpu_count() or 2)
        read_pool(table, seed, last, executor)  # warm-up: worker processes and their imports
        read = lambda: read_pool(table, seed, last, executor)  # noqa: E731
    else:
        # workers must be able to import bench.cases.fastdaemon if --spark-conf names it
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        conf = dict(item.split("=", 1) for item in args.spark_conf)
        spark = spark_session(conf=conf)
        read_icetail(table, seed, last, spark)  # warm-up
        read = lambda: read_icetail(table, seed, last, spark)  # noqa: E731
    for i in range(args.iterations):
        before = cpu_by_kind()
        timing = read()
        cpu = {k: round(v - before[k], 2) for k, v in cpu_by_kind().items()}
        raw = read_raw(data.files) if args.raw else None
        log(
            f"profile read {i + 1}: {timing.seconds:.2f}s, {timing.rows_per_second / 1e6:.2f} M rows/s, "
            f"cpu seconds {cpu}" + (f"; raw pyarrow {raw.seconds:.2f}s, ratio {ratio(raw, timing)}x" if raw else "")
        )
    return 0


CASES: dict[str, Callable[[Context], CaseResult]] = {
    "append": case_append,
    "mor": case_mor,
    "cow": case_cow,
    "planning": case_planning,
    "recovery": case_recovery,
    "serve": case_serve,
    "memory": case_memory,
    "delivered": lambda ctx: __import__("bench.cases.delivered").cases.delivered.case_delivered(ctx),
}


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, Timing):
        return {
            "seconds": round(value.seconds, 4),
            "rows_in": value.rows_in,
            "rows_out": value.rows_out,
            "rows_per_second": round(value.rows_per_second),
            **value.extra,
        }
    if isinstance(value, Goal):
        return asdict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def print_case(result: CaseResult) -> None:
    print(f"\n== {result.case} ({result.seconds:.1f}s; load average {result.load[0]} -> {result.load[1]})", flush=True)
    for name, timing in result.timings.items():
        if isinstance(timing, Timing):
            rate = f"{timing.rows_per_second / 1e6:8.2f} M rows/s" if timing.rows_in else ""
            print(f"  {name:28s} {timing.seconds:9.3f} s  {rate}  out={timing.rows_out:,}")
        else:
            print(f"  {name:28s} {json.dumps(_jsonable(timing))}")
    for name, value in result.ratios.items():
        print(f"  ratio {name:40s} {value:8.3f}x")
    for goal in result.goals:
        status = "MET" if goal.met else ("NOT MET" if goal.met is not None else "not measured")
        print(f"  goal  {goal.name}: {goal.target}, got {goal.value} -> {status}")
    for note in result.notes:
        print(f"  note  {note}")


def print_summary(results: list[CaseResult]) -> None:
    print("\n== summary: ratios (baseline seconds / icetail seconds unless named otherwise)")
    for result in results:
        for name, value in result.ratios.items():
            print(f"  {result.case:9s} {name:44s} {value:8.3f}x")
    print("== goals")
    for result in results:
        for goal in result.goals:
            status = "MET" if goal.met else ("NOT MET" if goal.met is not None else "not measured")
            print(f"  [{status:7s}] {goal.name}: {goal.target}, got {goal.value}")


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workdir", default=DEFAULT_WORKDIR, help=f"data, catalog and results (default {DEFAULT_WORKDIR})"
    )
    parser.add_argument("--scale", choices=sorted(gen.SCALES), default="default")
    parser.add_argument("--cases", default=",".join(ALL_CASES), help=f"comma-separated subset of {','.join(ALL_CASES)}")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--row-group-rows", type=int, default=None)
    parser.add_argument("--files-per-snapshot", type=int, default=None)
    parser.add_argument("--big-file-row-groups", type=int, default=None)
    parser.add_argument("--history", default=None, help="planning: snapshot counts, e.g. 10,100,1000")
    parser.add_argument("--history-entries", type=int, default=None)
    parser.add_argument("--cow-files", type=int, default=None)
    parser.add_argument("--serve-commits", type=int, default=None)
    parser.add_argument("--serve-interval", type=float, default=1.0, help="serve: poll interval in seconds")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per measurement (best reported)")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--skip-java", action="store_true", help="leave out the Java Iceberg baselines (smoke test)")
    parser.add_argument("--json", default=None, help="results file (default <workdir>/results-<scale>-<time>.json)")
    sub = parser.add_subparsers(dest="command")
    probe = sub.add_parser("memprobe", help=argparse.SUPPRESS)
    probe.add_argument("--table", required=True)
    probe.add_argument("--from-snapshot", type=int, required=True)
    probe.add_argument("--to-snapshot", type=int, required=True)
    probe.add_argument("--to-driver", action="store_true", help="return the rows to the driver (iter_changes)")
    prof = sub.add_parser("profile", help="the append read in a loop, to run under py-spy or pyinstrument")
    prof.add_argument("--iterations", type=int, default=3)
    prof.add_argument("--mode", choices=("spark", "inprocess", "pool", "threads"), default="spark")
    prof.add_argument("--raw", action="store_true", help="time a raw pyarrow decode after each read (ratio)")
    prof.add_argument("--spark-conf", action="append", default=[], help="KEY=VALUE for icetail's session (repeatable)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # pyiceberg reads PYICEBERG_* once, when pyiceberg.catalog is first imported: set them first
    os.environ.update(catalog_env(workdir, "profile-catalog" if args.command == "profile" else "catalog"))
    if args.command == "memprobe":
        return memprobe(args)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - set(ALL_CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; choose from {','.join(ALL_CASES)}")
    scale = gen.scale_with(
        gen.SCALES[args.scale],
        rows=args.rows,
        files=args.files,
        row_group_rows=args.row_group_rows,
        files_per_snapshot=args.files_per_snapshot,
        big_file_row_groups=args.big_file_row_groups,
        history=tuple(int(x) for x in args.history.split(",")) if args.history else None,
        history_entries=args.history_entries,
        cow_files=args.cow_files,
        serve_commits=args.serve_commits,
        repeat=args.repeat,
    )
    if args.command == "profile":
        return profile_target(args, scale)
    info = machine()
    log(f"icetail bench: scale {scale.name} {asdict(scale)}; cases {','.join(cases)}")
    log(f"machine: {info['nproc']} cpus, {info['memory_gib']} GiB, {info['cpu']}; code at {info['git_commit']}")
    data = gen.generate(workdir, scale, args.seed, log=log)

    from tests.support.javaref import new_catalog

    root, _, _ = catalog_paths(workdir)
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    spark = start_session(args.driver_memory)
    jvm_s = time.perf_counter() - t0
    catalog = new_catalog(spark, root, name=CATALOG)
    t0 = time.perf_counter()
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).count()  # first Python workers
    workers_s = time.perf_counter() - t0
    startup = {"jvm_session_s": round(jvm_s, 2), "first_python_job_s": round(workers_s, 2)}
    log(f"startup (excluded from throughput): {startup}")
    ctx = Context(args, scale, workdir, data, catalog, spark, startup)
    results: list[CaseResult] = []
    failures: dict[str, str] = {}
    for name in cases:
        log(f"case {name}")
        started = time.perf_counter()
        load_before = os.getloadavg()[0]
        try:
            result = CASES[name](ctx)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            import traceback

            traceback.print_exc()
            failures[name] = f"{type(exc).__name__}: {exc}"
            continue
        result.seconds = time.perf_counter() - started
        result.load = (round(load_before, 2), round(os.getloadavg()[0], 2))
        results.append(result)
        print_case(result)
    print_summary(results)
    for name, message in failures.items():
        print(f"  [FAILED ] case {name}: {message}")
    out = (
        Path(args.json)
        if args.json
        else workdir / f"results-{scale.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    payload = {
        "machine": info,
        "scale": asdict(scale),
        "seed": args.seed,
        "generation_s": round(data.seconds, 1),
        "startup": startup,
        "results": [_jsonable(asdict(r) | {"timings": r.timings}) for r in results],
        "failures": failures,
    }
    out.write_text(json.dumps(payload, indent=1, default=str))
    print(f"results: {out}")
    spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
