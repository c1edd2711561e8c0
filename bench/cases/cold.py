"""Cold start, whole process: `icetail changes --output X.parquet` from a fresh interpreter.

Issue 10 section 5 measures icetail as a user runs it once: a new process that starts Spark,
loads the catalog, plans, reads, writes one parquet file and exits. Each round runs, for each
interpreter given (default: this one and `.venv-spark4/bin/python` when present), interleaved:

* `icetail_changes` - `python -m icetail changes --output X.parquet` of the appended snapshot;
* `icetail_changes_no_zygote` - the same with `ICETAIL_DAEMON_ZYGOTE=0`: the worker daemon
  imports the read path after the JVM's start, not beside it (reader/spark/daemon_zygote.py);
* `icetail_changes_local` - the same with `--engine local`: read in icetail's own process, no JVM
  (reader/local.py; `auto` picks it below ICETAIL_LOCAL_MAX_BYTES);
* `icetail_changes_no_class_cache` - the same with ICETAIL_JVM_CLASS_CACHE=off: the JVM loads its
  classes from the jars, as on a first start (reader/spark/class_cache.py; the other cases map the
  cache, written before the first round as a user's first command writes it);
* `spark_start_stop_no_class_cache` - the bare start without the class cache;
* `spark_start_stop` - the same interpreter starting and stopping icetail's local SparkSession
  (no zygote: a bare start);
* `raw_read_write` - `pyarrow.parquet.read_table` of the files (threaded) and `write_table`;
* `java_iceberg` - (pyspark 3.5 with the test jars) Java Iceberg 1.10 reading the same range
  incrementally (`start-snapshot-id`/`end-snapshot-id`) and writing it as parquet.

Goals (issue 10 s5): icetail >= 0.9x of (raw_read_write + spark_start_stop), >= 1.5x Java.

    .venv/bin/python -m bench.cases.cold --rows 8000000 --files 8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cases.delivered import Target, log, standalone_target  # noqa: E402

RAW = """
import sys, pyarrow.parquet as pq
out, files = sys.argv[1], sys.argv[2:]
pq.write_table(pq.read_table(files, use_threads=True), out)
"""

SPARK = """
from icetail.reader.spark.session import spark_session
spark_session().stop()
"""

JAVA = """
import os, sys, json
from tests.support.javaref import spark_conf
from pyspark.sql import SparkSession
metadata, start, end, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
conf = spark_conf()
conf.update({"spark.master": "local[*]", "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
             "spark.driver.memory": "4g"})
builder = SparkSession.builder
for k, v in conf.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
df = spark.read.format("iceberg").option("start-snapshot-id", start).option("end-snapshot-id", end).load(metadata)
df.write.mode("overwrite").parquet(out)
spark.stop()
"""


def _pyspark_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _run(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


NO_ZYGOTE = {"ICETAIL_DAEMON_ZYGOTE": "0"}  # reader/spark/daemon_zygote.py off
NO_CLASS_CACHE = {"ICETAIL_JVM_CLASS_CACHE": "off"}  # reader/spark/class_cache.py off


def _case_env(name: str, env: dict[str, str]) -> dict[str, str]:
    """A case's environment: the zygote only in `icetail_changes*` (not `_no_zygote`), the class cache but in
    `*_no_class_cache`."""
    zygote = name in ("icetail_changes", "icetail_changes_no_class_cache")
    own = dict(env) if zygote else {**env, **NO_ZYGOTE}
    return {**own, **NO_CLASS_CACHE} if name.endswith("_no_class_cache") else own


def _warm_class_cache(python: str, env: dict[str, str]) -> None:
    """The class cache as users have it after their first command: written, then checked and adopted."""
    for _ in range(2):  # the first start's JVM writes it at exit; the second adopts it
        subprocess.run([python, "-c", SPARK], env=env, cwd=REPO, capture_output=True, check=True)
        time.sleep(15)  # the JVM writes ~150 MB after the interpreter exits
    archives = sorted(p.name for p in Path(env["ICETAIL_JVM_CLASS_CACHE"]).glob("*.jsa") if ".partial." not in p.name)
    log(f"class cache after {python}'s two starts: {archives}")


def commands(python: str, t: Target, scratch: Path, java: bool) -> dict[str, list[str]]:
    from bench import generate as gen

    files = [gen.local_path(f) for f in t.files]
    changes = [
        python, "-m", "icetail", "changes", "--catalog", t.catalog, "--table", t.ident,
        "--from-snapshot", str(t.from_exclusive), "--to-snapshot", str(t.to_inclusive),
        "--output", str(scratch / "icetail.parquet"),
    ]  # fmt: skip
    out = {
        "icetail_changes": changes,
        "icetail_changes_no_zygote": changes,  # the worker daemon imported after the JVM's start (R44)
        "icetail_changes_local": [*changes, "--engine", "local"],  # in process, no JVM (issue 37 s1)
        "icetail_changes_no_class_cache": changes,  # the JVM's classes not from the cache (as a first start)
        "spark_start_stop": [python, "-c", SPARK],  # a bare start: no zygote importing beside it
        "spark_start_stop_no_class_cache": [python, "-c", SPARK],
        "raw_read_write": [python, "-c", RAW, str(scratch / "raw.parquet"), *files],
    }
    if java:
        metadata = t.table.metadata_location
        out["java_iceberg"] = [
            python, "-c", JAVA, metadata, str(t.from_exclusive), str(t.to_inclusive), str(scratch / "java"),
        ]  # fmt: skip
    return out


def measure(pythons: list[str], t: Target, rounds: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    versions = {python: _pyspark_version(python) for python in pythons}
    scratch = Path(tempfile.mkdtemp(prefix="icetail-cold-"))
    env["ICETAIL_JVM_CLASS_CACHE"] = str(scratch.parent / "icetail-cold-class-cache")
    for python in pythons:
        _warm_class_cache(python, env)
    runs: dict[str, dict[str, list[float]]] = {p: {} for p in pythons}
    try:
        java_ok = {p: versions[p].startswith("3.5") and _java_available(p, env) for p in pythons}
        for round_index in range(rounds):
            for python in pythons:
                for name, argv in commands(python, t, scratch, java_ok[python]).items():
                    seconds = _run(argv, _case_env(name, env))
                    runs[python].setdefault(name, []).append(seconds)
                    log(f"round {round_index + 1} pyspark {versions[python]}: {name} {seconds:.2f}s")
            for leftover in scratch.iterdir():
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report: dict[str, Any] = {}
    for python in pythons:
        med = {name: statistics.median(values) for name, values in runs[python].items()}
        entry: dict[str, Any] = {
            "pyspark": versions[python],
            "seconds": {
                name: {"min": round(min(v), 2), "median": round(med[name], 2), "max": round(max(v), 2)}
                for name, v in runs[python].items()
            },
            "vs_raw_plus_spark_start_median": round(
                (med["raw_read_write"] + med["spark_start_stop"]) / med["icetail_changes"], 3
            ),
            "no_zygote_vs_raw_plus_spark_start_median": round(
                (med["raw_read_write"] + med["spark_start_stop"]) / med["icetail_changes_no_zygote"], 3
            ),
            "no_class_cache_vs_raw_plus_spark_start_median": round(
                (med["raw_read_write"] + med["spark_start_stop_no_class_cache"])
                / med["icetail_changes_no_class_cache"],
                3,
            ),
        }
        if "java_iceberg" in med:
            entry["vs_java_median"] = round(med["java_iceberg"] / med["icetail_changes"], 3)
            entry["local_vs_java_median"] = round(med["java_iceberg"] / med["icetail_changes_local"], 3)
            entry["no_class_cache_vs_java_median"] = round(
                med["java_iceberg"] / med["icetail_changes_no_class_cache"], 3
            )
        report[python] = entry
    return report


def _java_available(python: str, env: dict[str, str]) -> bool:
    probe = "from tests.support.javaref import spark_jars; [p.resolve(strict=True) for p in spark_jars()]"
    return subprocess.run([python, "-c", probe], env=env, cwd=REPO, capture_output=True).returncode == 0


def print_report(report: dict[str, Any], load: tuple[float, float]) -> None:
    print(f"\n== cold start, whole process (load average {load[0]:.2f} -> {load[1]:.2f}); seconds min / median / max")
    for entry in report.values():
        print(f"  pyspark {entry['pyspark']}")
        for name, s in entry["seconds"].items():
            print(f"    {name:32s} {s['min']:7.2f} {s['median']:7.2f} {s['max']:7.2f}")
        ratio = entry["vs_raw_plus_spark_start_median"]
        print(f"    icetail vs (raw read+write + Spark start/stop), medians: {ratio}x")
        print(f"    the same without the daemon zygote: {entry['no_zygote_vs_raw_plus_spark_start_median']}x")
        print(f"    both without the class cache: {entry['no_class_cache_vs_raw_plus_spark_start_median']}x")
        if "vs_java_median" in entry:
            print(f"    icetail vs Java Iceberg, medians: {entry['vs_java_median']}x")
            print(f"    icetail --engine local vs Java Iceberg, medians: {entry['local_vs_java_median']}x")
            print(f"    without the class cache vs Java Iceberg, medians: {entry['no_class_cache_vs_java_median']}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.cold", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/icetail-bench")
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", action="append", default=None, help="interpreter to measure (repeatable)")
    parser.add_argument("--json", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    pythons = args.python or [sys.executable] + [
        str(p) for p in [REPO / ".venv-spark4" / "bin" / "python"] if p.exists() and str(p) != sys.executable
    ]
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    target = standalone_target(workdir, args.rows, args.files, args.row_group_rows, args.seed)
    load_before = os.getloadavg()[0]
    report = measure(pythons, target, args.rounds)
    print_report(report, (load_before, os.getloadavg()[0]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
