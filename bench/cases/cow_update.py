"""Issue 24.1: a copy-on-write UPDATE of 0.1% of an N-row table, delivered by `icetail run` with the
reconciliation partitioned in Spark tasks, against the N-row append and Java's changelog.

Whole processes, each sampled every 20 ms for the peak RSS of its process tree (driver, JVM,
Python workers; bench/procs.py):
- `append`: `icetail run --once` of the N-row append snapshot into a parquet sink;
- `update`: `icetail run --once --identifier-columns id` of the UPDATE snapshot (every file
  rewritten, N/1000 rows changed), the reconciliation partitioned (default partition size);
- `update_driver` (with --driver): the same, reconciled whole in the driver (`--reconcile-partition-bytes 0`);
- `changes` (with --changes): `icetail changes --identifier-columns id --output X.parquet` of the
  UPDATE snapshot, partitioned (and `changes_driver` with --driver: whole in the driver);
- `java`: Java Iceberg's `create_changelog_view(compute_updates => true, identifier_columns => id)`
  over the same snapshot into Spark's noop sink, in its own process (timed inside the JVM too).
Run with the pyspark 3.5 venv (Java's Iceberg runtime exists for 3.5 only; it prepares the table
and runs `java`); `--icetail-python .venv-spark4/bin/python` runs icetail's own processes on the
pyspark 4 line instead (the install users get):

    .venv/bin/python -m bench.cases.cow_update --rows 8000000 --files 8 [--driver] [--changes] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402
from bench.procs import _children, _rss_and_kind  # noqa: E402

CATALOG = "icecowu"
TABLE = "cowu"
PREDICATE = "id % 1000 = 0"


def prepare(workdir: Path, rows: int, files: int, seed: int) -> dict[str, Any]:
    """The data set, a copy-on-write table with it appended, then Java's UPDATE; the snapshot ids."""
    scale = gen.scale_with(gen.SCALES["small"], rows=rows, files=files, row_group_rows=100_000)
    data = gen.generate(workdir, scale, seed, log=lambda m: print(m, file=sys.stderr))
    from bench.session import start_session
    from tests.support.javaref import new_catalog

    root = workdir / "cow-update-catalog"
    shutil.rmtree(root, ignore_errors=True)
    spark = start_session("2g")
    catalog = new_catalog(spark, root, name=CATALOG)
    gen.create_table(catalog, TABLE, mode="copy-on-write")
    seed = gen.seed_snapshot(catalog, TABLE, data)
    appended = gen.add_files(catalog, TABLE, data.files)
    catalog.sql(f"UPDATE {catalog.fq(TABLE)} SET name = concat(name, '-u') WHERE {PREDICATE}").collect()
    updated = catalog.current_snapshot_id(TABLE)
    spark.stop()
    assert updated is not None
    return {"seed": seed, "appended": appended, "updated": int(updated), "env": catalog.env()}


def measured(cmd: list[str], env: dict[str, str]) -> dict[str, float | str]:
    """Run `cmd`, sampling its process tree: wall seconds, peak RSS (total and per kind), its stderr tail."""
    peak = {"total": 0, "jvm": 0, "python": 0, "driver": 0}
    at_peak = {"jvm": 0, "driver": 0, "workers": 0}  # the tree's make-up when its total peaked
    processes: list[float] = []  # each process's GB then (the driver first)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = {"jvm": 0, "python": 0, "driver": 0}
            each = []
            for pid in [proc.pid, *_children(proc.pid)]:
                rss, kind = _rss_and_kind(pid)
                if kind != "gone":
                    each.append(round(rss / 1e9, 2))
                    now["jvm" if kind == "jvm" else "python"] += rss
                    if pid == proc.pid:
                        now["driver"] = rss
            for key in ("jvm", "python", "driver"):
                peak[key] = max(peak[key], now[key])
            if now["jvm"] + now["python"] > peak["total"]:
                peak["total"] = now["jvm"] + now["python"]
                at_peak.update(jvm=now["jvm"], driver=now["driver"], workers=now["python"] - now["driver"])
                processes[:] = each
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}):\n{err[-3000:]}")
    return {
        "seconds": round(seconds, 2),
        "peak_gb": round(peak["total"] / 1e9, 2),
        "peak_jvm_gb": round(peak["jvm"] / 1e9, 2),
        "peak_python_gb": round(peak["python"] / 1e9, 2),
        "peak_driver_gb": round(peak["driver"] / 1e9, 2),
        "at_peak_gb": {k: round(v / 1e9, 2) for k, v in at_peak.items()},
        "at_peak_processes_gb": processes,
        "stdout": out.strip()[-400:],
        "stderr": err.strip()[-400:],
    }


def fresh_out_dir(workdir: Path, name: str) -> Path:
    """An empty folder for one case's output (what an earlier round left is removed)."""
    out = workdir / "cow-update-out" / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


ICETAIL_PYTHON = [sys.executable]  # --icetail-python: the interpreter of icetail's own processes


def icetail_run(workdir: Path, name: str, after: int, extra: list[str]) -> list[str]:
    out = fresh_out_dir(workdir, name)
    return [
        ICETAIL_PYTHON[0], "-m", "icetail", "run",
        "--catalog", CATALOG, "--table", f"ns.{TABLE}",
        "--state", f"sqlite:///{out}/state.db", "--sink", f"parquet://{out}/sink",
        "--consumer", name, "--start", f"snapshot:{after}", "--max-snapshots-per-batch", "1", "--once",
        *extra,
    ]  # fmt: skip


def icetail_changes(workdir: Path, name: str, after: int, until: int, extra: list[str]) -> list[str]:
    out = fresh_out_dir(workdir, name)
    return [
        ICETAIL_PYTHON[0], "-m", "icetail", "changes",
        "--catalog", CATALOG, "--table", f"ns.{TABLE}",
        "--from-snapshot", str(after), "--to-snapshot", str(until),
        "--identifier-columns", "id", "--output", str(out / "changes.parquet"),
        *extra,
    ]  # fmt: skip


JAVA_SCRIPT = """
import json, sys, time
sys.path.insert(0, {repo!r})
from bench.session import start_session
from tests.support.javaref import new_catalog
from pathlib import Path
spark = start_session("2g")
catalog = new_catalog(spark, Path({root!r}), name={name!r})
started = time.monotonic()
catalog.sql("CALL {{cat}}.system.create_changelog_view(table => 'ns.{table}', changelog_view => 'v', "
            "options => map('start-snapshot-id', '{start}', 'end-snapshot-id', '{end}'), "
            "compute_updates => true, identifier_columns => array('id'))")
rows = spark.sql("SELECT * FROM v").count()
print(json.dumps({{"inside_seconds": round(time.monotonic() - started, 2), "rows": rows}}))
spark.stop()
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.cow_update", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/icetail-bench")
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--driver", action="store_true", help="also the in-driver reconciliation")
    parser.add_argument("--reuse", action="store_true", help="keep the prepared table of an earlier run")
    parser.add_argument("--changes", action="store_true", help="also `icetail changes` of the UPDATE snapshot")
    parser.add_argument("--only", default=None, help="a,b: only these cases (append,update,java,update_driver,...)")
    parser.add_argument(
        "--icetail-python",
        default=sys.executable,
        help="the interpreter of icetail's processes (e.g. the pyspark 4 venv's); Java's runs in this one",
    )
    parser.add_argument(
        "--heap-1g", action="store_true", help="also `update_1g`: the update with Spark's own 1 GiB driver heap"
    )
    parser.add_argument(
        "--serial-gc",
        action="store_true",
        help="also `append_serial` and `update_serial`: the driver JVM on the serial collector (JAVA_TOOL_OPTIONS)",
    )
    parser.add_argument("--tag", default="", help="a suffix of the output folders (runs side by side)")
    parser.add_argument("--update-extra", default="", help="more arguments of the `update` case's `icetail run`")
    parser.add_argument("--prepare-only", action="store_true", help="prepare the table (or reuse it) and stop")
    args = parser.parse_args(argv)
    ICETAIL_PYTHON[0] = args.icetail_python
    workdir = Path(args.workdir).resolve()
    ids_file = workdir / f"cow-update-{args.rows}.json"
    if args.reuse and ids_file.exists():
        ids = json.loads(ids_file.read_text())
    else:
        ids = prepare(workdir, args.rows, args.files, args.seed)
        ids_file.write_text(json.dumps(ids))
    if args.prepare_only:
        print(json.dumps(ids))
        return 0
    env = {**os.environ, **ids["env"], "PYTHONPATH": str(REPO)}
    runs: dict[str, list[dict[str, float | str]]] = {}
    java = [
        sys.executable,
        "-c",
        JAVA_SCRIPT.format(
            repo=str(REPO),
            root=str(workdir / "cow-update-catalog"),
            name=CATALOG,
            table=TABLE,
            start=ids["appended"],
            end=ids["updated"],
        ),
    ]
    appended_after = ids["appended"]
    for round_ in (f"{r}{args.tag}" for r in range(args.repeat)):
        cases = {
            "append": icetail_run(workdir, f"append{round_}", ids["seed"], []),
            "update": icetail_run(
                workdir, f"update{round_}", appended_after, ["--identifier-columns", "id", *args.update_extra.split()]
            ),
            "java": java,
        }
        if args.driver:
            cases["update_driver"] = icetail_run(
                workdir,
                f"driver{round_}",
                appended_after,
                ["--identifier-columns", "id", "--reconcile-partition-bytes", "0"],
            )
        if args.changes:
            cases["changes"] = icetail_changes(workdir, f"changes{round_}", appended_after, ids["updated"], [])
            if args.driver:
                cases["changes_driver"] = icetail_changes(
                    workdir,
                    f"changes_driver{round_}",
                    appended_after,
                    ids["updated"],
                    ["--reconcile-partition-bytes", "0"],
                )
        if args.heap_1g:
            cases["update_1g"] = icetail_run(
                workdir, f"update1g{round_}", appended_after, ["--identifier-columns", "id"]
            )
        if args.serial_gc:
            cases["append_serial"] = icetail_run(workdir, f"appendserial{round_}", ids["seed"], [])
            cases["update_serial"] = icetail_run(
                workdir, f"updateserial{round_}", appended_after, ["--identifier-columns", "id"]
            )
        if args.only:
            cases = {k: v for k, v in cases.items() if k in args.only.split(",")}
        for name, cmd in cases.items():
            own = {"PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"} if name == "update_1g" else {}
            if name.endswith("_serial"):  # no GC flag in icetail's own options: this one is the collector
                own = {"JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC"}
            result = measured(cmd, {**env, **own})
            runs.setdefault(name, []).append(result)
            print(name, json.dumps(result), file=sys.stderr, flush=True)
    print(json.dumps({"rows": args.rows, "files": args.files, "ids": ids, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
