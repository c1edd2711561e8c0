"""Case `memory`: peak RSS of a fresh process per snapshot size (`bench.run memprobe` is the child)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench import generate as gen
from bench.harness import REPO, Context, log
from bench.procs import RssSampler
from bench.readers import rows_dropped_in_tasks
from bench.results import CaseResult, Goal
from bench.session import CATALOG, catalog_env


def memprobe(args: argparse.Namespace) -> int:
    """Child process: read (from, to] of one table with icetail's own session.

    By default the rows are dropped in the Spark tasks (the staging sinks' path); with
    `--to-driver` every row comes back to the driver through iter_changes.
    """
    from icetail.monitor.engine.api import iter_changes
    from icetail.monitor.engine.catalog import load_table, open_catalog
    from icetail.monitor.planning.planner import Planner
    from icetail.reader.spark.session import spark_session

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
