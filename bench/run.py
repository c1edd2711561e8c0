"""The benchmark runner: `python -m bench.run [--scale small|default|tiny] [--cases a,b,...]`.

Every case measures icetail through its real path (`Planner.plan` + `icetail.monitor.engine.api.iter_changes`
on a local-mode SparkSession, consuming the Arrow batches; or `Pipeline` / `icetail serve`) and
the baselines in the same run, and prints ratios `baseline seconds / icetail seconds` (so > 1
means icetail is faster). One SparkSession (the Java Iceberg reference's jars plus icetail's own
defaults) serves icetail and the Java baselines; its start-up and the first job (Python worker
start) are measured once and excluded from the throughput figures by a warm-up read.

Cases: append, mor, cow, planning, recovery, serve, memory, delivered (see bench/README.md).
Results: printed, and written as JSON to `<workdir>/results-<scale>-<utc time>.json`.

This module is the command line only. The parts, one job each: `bench.harness` (timed and
interleaved runs, the case context), `bench.session` (catalog and SparkSession), `bench.readers`
(icetail's paths and the baselines), `bench.cases.*` (one module per case), `bench.procs` (CPU
and RSS of the process tree), `bench.report` (printing and JSON), `bench.profile` (`profile`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python bench/run.py`: make `bench` and `tests.support` importable
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402
from bench.cases.append import case_append  # noqa: E402
from bench.cases.cow import case_cow  # noqa: E402
from bench.cases.memory import case_memory, memprobe  # noqa: E402
from bench.cases.mor import case_mor  # noqa: E402
from bench.cases.planning import case_planning  # noqa: E402
from bench.cases.recovery import case_recovery  # noqa: E402
from bench.cases.serve import case_serve  # noqa: E402
from bench.harness import Context, log  # noqa: E402
from bench.profile import profile_target  # noqa: E402
from bench.report import jsonable, machine, print_case, print_summary  # noqa: E402
from bench.results import CaseResult  # noqa: E402
from bench.session import CATALOG, catalog_env, catalog_paths, start_session  # noqa: E402

ALL_CASES = ("append", "mor", "cow", "planning", "recovery", "serve", "memory", "delivered")
DEFAULT_WORKDIR = "/tmp/icetail-bench"


def _case_delivered(ctx: Context) -> CaseResult:
    from bench.cases.delivered import case_delivered  # imports this harness's pieces itself

    result: CaseResult = case_delivered(ctx)
    return result


CASES: dict[str, Callable[[Context], CaseResult]] = {
    "append": case_append,
    "mor": case_mor,
    "cow": case_cow,
    "planning": case_planning,
    "recovery": case_recovery,
    "serve": case_serve,
    "memory": case_memory,
    "delivered": _case_delivered,
}


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
        "results": [jsonable(asdict(r) | {"timings": r.timings}) for r in results],
        "failures": failures,
    }
    out.write_text(json.dumps(payload, indent=1, default=str))
    print(f"results: {out}")
    spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
