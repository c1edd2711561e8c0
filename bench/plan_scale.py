"""Planning tables of 100,000+ files: icetail's `Planner.plan` against Java's incremental scans (issue 24 §2).

    .venv/bin/python -m bench.plan_scale --workdir /tmp/icetail-bench/bigplan --table unmerged [--rounds 3]

On a table built by `bench.big_table` (the same `--workdir`), three ranges ending at the head
snapshot S_n: one new snapshot (S_n-1, S_n], a range (S_n-1000, S_n] and the whole history
(before S_1, S_n]. For each:

* icetail cold: a fresh `Planner` per round (an empty manifest cache; what `icetail plan` and
  the first batch of `run` do), with `--threads` planning threads (default: 1 and the default,
  for the A/B); seconds (min and median of `--rounds`), the process's CPU seconds (min), manifests
  read, tasks; warm: the same Planner plans the range again (its manifest cache filled by the
  cold plan, as a serve that replans after a failure);
* Java: `newIncrementalAppendScan()` and `newIncrementalChangelogScan()` of the same range
  (`fromSnapshotExclusive(a).toSnapshot(b)`; the whole history: `toSnapshot(b)` alone), the
  table loaded afresh each round (so no manifest list is cached in its Snapshot objects), one
  JVM (Spark 3.5 with the iceberg-spark-runtime jar, C2 on, `--java-heap`); timed in the JVM
  (`System.nanoTime` around the full iteration of `planFiles()`, in the JVM). A warm-up round
  comes first on the one-new-snapshot range (the JIT); the big ranges get one only with
  `--java-warmup` (a warm-up of the whole history costs as much as the plan). A plan that fails
  (an OutOfMemoryError) is recorded as its error and the run goes on;
* serve: one Planner that planned (before S_1, S_n-1] plans (S_n-1, S_n] as the next cycle does:
  manifests read and seconds (its cache kept);
* memory, each range in a child process: the driver's peak RSS above the RSS after loading the
  table, and tracemalloc's peak of the plan; Java: the heap's peak above the heap after a GC
  (garbage included: the JVM does not collect until it needs to).

Prints one JSON document; the figures go to bench/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `tests.support` is not an installed package
    sys.path.insert(0, str(REPO))

from bench.big_table import CATALOG, open_pyiceberg  # noqa: E402
from icetail.monitor.planning.lineage import snapshots_between  # noqa: E402
from icetail.monitor.planning.manifests import DEFAULT_PLANNING_THREADS  # noqa: E402
from icetail.monitor.planning.planner import Planner  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def ranges(table: Any, span: int) -> dict[str, tuple[int | None, int]]:
    """{name: (from exclusive, to inclusive)} of the three measured ranges on the head's history."""
    head = table.metadata.current_snapshot_id
    chain = snapshots_between(table.metadata, None, head)
    return {
        "new_snapshot": (chain[-2].snapshot_id, head),
        f"range_{span}": (chain[-span - 1].snapshot_id, head),
        "whole_history": (None, head),
    }


def icetail_rounds(table: Any, bounds: tuple[int | None, int], rounds: int, threads: int) -> dict[str, Any]:
    times, cpu, warm, plan, cold_read = [], [], [], None, 0
    for _ in range(rounds):
        planner = Planner(table, planning_threads=threads)  # cold: a fresh manifest cache
        started, started_cpu = time.perf_counter(), time.process_time()
        plan = planner.plan(*bounds)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        cold_read = plan.manifests_read
        del plan
        started = time.perf_counter()
        plan = planner.plan(*bounds)  # warm: the same Planner, its manifest cache kept
        warm.append(time.perf_counter() - started)
        del planner
    assert plan is not None
    return {
        "min_s": round(min(times), 4),
        "median_s": round(statistics.median(times), 4),
        "cpu_min_s": round(min(cpu), 4),  # the process's CPU seconds: less disturbed by a loaded machine
        "warm_min_s": round(min(warm), 4),
        "warm_manifests_read": plan.manifests_read,
        "manifests_read": cold_read,
        "tasks": len(plan.tasks),
        "snapshots": len(plan.commits),
    }


def serve_cycle(table: Any, bounds: tuple[int | None, int]) -> dict[str, Any]:
    """The next serve cycle after a catch-up: one Planner, its cache kept across the two plans."""
    planner = Planner(table)
    started = time.perf_counter()
    planner.plan(None, bounds[0])
    catch_up = time.perf_counter() - started
    started = time.perf_counter()
    plan = planner.plan(*bounds)
    return {
        "catch_up_s": round(catch_up, 3),
        "next_cycle_s": round(time.perf_counter() - started, 5),
        "next_cycle_manifests_read": plan.manifests_read,
        "tasks": len(plan.tasks),
    }


def memory_child(workdir: Path, table_name: str, from_id: int | None, to_id: int) -> dict[str, Any]:
    """Run in a child process: peak RSS and tracemalloc peak of one cold plan."""
    table = open_pyiceberg(workdir).load_table(f"ns.{table_name}")
    snapshots_between(table.metadata, None, to_id)  # the snapshot index, as every plan has it
    base = _rss_kib()
    tracemalloc.start()
    plan = Planner(table).plan(from_id, to_id)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "rss_after_load_mib": round(base / 1024, 1),
        "peak_rss_above_load_mib": round((peak_rss - base) / 1024, 1),
        "tracemalloc_peak_mib": round(peak / 2**20, 1),
        "tasks": len(plan.tasks),
    }


def memory(workdir: Path, table_name: str, bounds: tuple[int | None, int]) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.plan_scale", "--workdir", str(workdir), "--table", table_name,
               "--memory-child", json.dumps(list(bounds))]  # fmt: skip
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    return dict(json.loads(done.stdout))


# -- Java ---------------------------------------------------------------------------------------


def java_session(heap: str) -> Any:
    """The 3.5 reference session with the JIT's C2 on (the test session stops at C1)."""
    from pyspark.sql import SparkSession

    from tests.support.javaref import spark_conf

    builder = SparkSession.builder
    conf = {**spark_conf(), "spark.driver.extraJavaOptions": "-XX:+UseParallelGC", "spark.driver.memory": heap}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class JavaPlanner:
    """Java's incremental scans of one table, timed in the JVM."""

    def __init__(self, workdir: Path, table_name: str, heap: str) -> None:
        from tests.support.javaref import new_catalog

        self._spark = java_session(heap)
        self._catalog = new_catalog(self._spark, workdir / "iceberg", CATALOG)
        self._ident = f"ns.{table_name}"
        jvm = self._spark._jvm
        self._jvm = jvm
        self._iterables = jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables

    def plan(self, kind: str, bounds: tuple[int | None, int]) -> tuple[float, int, float]:
        """(seconds, tasks, heap peak MiB above the heap after a GC) of one plan on a freshly loaded table."""
        table = self._catalog.java_table(self._ident)
        scan = table.newIncrementalAppendScan() if kind == "append" else table.newIncrementalChangelogScan()
        if bounds[0] is not None:
            scan = scan.fromSnapshotExclusive(bounds[0])
        scan = scan.toSnapshot(bounds[1])
        jvm = self._jvm
        jvm.java.lang.System.gc()
        beans = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        pools = [p for p in beans if str(p.getType()) == "Heap memory"]
        base = sum(p.getUsage().getUsed() for p in pools)
        for pool in pools:
            pool.resetPeakUsage()
        started = jvm.java.lang.System.nanoTime()
        tasks = self._iterables.size(scan.planFiles())
        elapsed = (jvm.java.lang.System.nanoTime() - started) / 1e9
        peak = sum(p.getPeakUsage().getUsed() for p in pools)
        return elapsed, int(tasks), max(0, peak - base) / 2**20

    def rounds(self, kind: str, bounds: tuple[int | None, int], rounds: int, warmup: bool) -> dict[str, Any]:
        from py4j.protocol import Py4JError

        runs = []
        try:
            if warmup:
                self.plan(kind, bounds)  # warm-up: JIT, page cache
            for _ in range(rounds):
                runs.append(self.plan(kind, bounds))
        except Py4JError as exc:  # an OutOfMemoryError in the JVM: record it, go on with the next
            return {"error": str(exc).splitlines()[0][:300], "completed_rounds": len(runs)}
        times = [r[0] for r in runs]
        return {
            "min_s": round(min(times), 4),
            "median_s": round(statistics.median(times), 4),
            "tasks": runs[-1][1],
            "heap_peak_above_gc_mib": round(max(r[2] for r in runs), 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/icetail-bench/bigplan"))
    parser.add_argument("--table", default="unmerged")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--range", type=int, default=1000, dest="span")
    parser.add_argument("--threads", default=f"1,{DEFAULT_PLANNING_THREADS}", help="planning threads to compare")
    parser.add_argument("--no-java", action="store_true")
    parser.add_argument("--java-heap", default="8g", help="the JVM's heap (spark.driver.memory)")
    parser.add_argument("--java-rounds", type=int, default=None, help="Java's rounds (default: --rounds)")
    parser.add_argument("--java-kinds", default="append,changelog")
    parser.add_argument("--java-warmup", action="store_true", help="a warm-up round on every range")
    parser.add_argument("--ranges", default=None, help="new_snapshot,range_1000,whole_history (default: all)")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    if args.memory_child is not None:
        from_id, to_id = json.loads(args.memory_child)
        print(json.dumps(memory_child(workdir, args.table, from_id, to_id)))
        return
    table = open_pyiceberg(workdir).load_table(f"ns.{args.table}")
    head = table.current_snapshot()
    assert head is not None and head.summary is not None
    manifests = len(head.manifests(table.io))
    result: dict[str, Any] = {
        "table": args.table,
        "snapshots": len(table.metadata.snapshots),
        "data_files": int(head.summary["total-data-files"] or 0),
        "manifests_in_head_list": manifests,
        "rounds": args.rounds,
        "ranges": {},
    }
    threads = [int(t) for t in args.threads.split(",") if t]
    java = None if args.no_java else JavaPlanner(workdir, args.table, args.java_heap)
    wanted = set(args.ranges.split(",")) if args.ranges else None
    for name, bounds in ranges(table, args.span).items():
        if wanted is not None and name not in wanted:
            continue
        log(f"{args.table} {name}: icetail")
        entry: dict[str, Any] = {"from_exclusive": bounds[0], "to_inclusive": bounds[1]}
        for count in threads:
            entry[f"icetail_threads_{count}"] = icetail_rounds(table, bounds, args.rounds, count)
        if threads:
            entry["icetail_memory"] = memory(workdir, args.table, bounds)
        best = min((entry[f"icetail_threads_{count}"]["min_s"] for count in threads), default=float("nan"))
        if java is not None:
            for kind in args.java_kinds.split(","):
                log(f"{args.table} {name}: Java {kind}")
                warmup = args.java_warmup or name == "new_snapshot"
                rounds = args.java_rounds if args.java_rounds is not None else args.rounds
                entry[f"java_{kind}"] = java.rounds(kind, bounds, rounds, warmup)
                if "min_s" in entry[f"java_{kind}"]:
                    entry[f"icetail_vs_java_{kind}_min"] = round(best / max(entry[f"java_{kind}"]["min_s"], 1e-6), 4)
        result["ranges"][name] = entry
        log(f"{args.table} {name}: {json.dumps(entry)}")  # each range as it is done: a cut-short run still tells
    if threads:
        log(f"{args.table}: serve cycle")
        result["serve_next_cycle"] = serve_cycle(table, ranges(table, args.span)["new_snapshot"])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
