"""A command costs what its work costs: `icetail changes --output x.parquet`, whole process, both engines.

Issue 37 s1. For each table size (pyiceberg-written appends, incompressible strings so the parquet
bytes are what is asked), rounds alternate `--engine local` and `--engine spark` in fresh
processes; every round is printed, then the medians. The smallest size is also cut into phases in
one process (interpreter, imports, catalog, planning, read, write), to say what dominates.
The threshold of `--engine auto` (ICETAIL_LOCAL_MAX_BYTES) is where local stops being faster.

    PYTHONPATH=. .venv/bin/python -m bench.cases.local_engine --sizes-mb 0,1,10,50,200 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = """
import json, sys, time
t = {"start": time.perf_counter()}
import pyarrow.parquet as pq
from icetail.monitor.cli.changes_read import write_changes  # the read path, as `changes` imports it
from icetail.monitor.engine.api import iter_changes, change_arrow_schema
t["imports"] = time.perf_counter()
from icetail.monitor.engine.catalog import load_table, open_catalog
table = load_table(open_catalog("bench"), sys.argv[1])
t["catalog"] = time.perf_counter()
from icetail.monitor.engine.api import plan_range
plan = plan_range(table)
t["planning"] = time.perf_counter()
import pyarrow as pa
batches = list(iter_changes(table, plan, engine="local"))
t["read"] = time.perf_counter()
pq.write_table(pa.Table.from_batches(batches, change_arrow_schema(table, plan.schema_id)), sys.argv[2])
t["write"] = time.perf_counter()
names = list(t)
print(json.dumps({b: round(t[b] - t[a], 3) for a, b in zip(names, names[1:])}))
"""


def make_table(python: str, env: dict[str, str], name: str, megabytes: float) -> None:
    """ns.NAME of about `megabytes` of parquet in 1-4 appends (0: a few thousand rows)."""
    script = f"""
import os, pyarrow as pa
from pyiceberg.catalog import load_catalog
catalog = load_catalog("bench")
if ("ns",) not in catalog.list_namespaces():
    catalog.create_namespace("ns")
rows = 5000 if {megabytes} == 0 else int({megabytes} * 1024 * 1024 / 72)
appends = 1 if rows < 200_000 else 4
schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("d", pa.float64())])
table = catalog.create_table("ns.{name}", schema=schema)
for part in range(appends):
    n = rows // appends
    start = part * n
    ids = pa.array(range(start, start + n), pa.int64())
    v = pa.array([os.urandom(24).hex() for _ in range(n)])
    table.append(pa.table({{"id": ids, "v": v, "d": pa.array([i * 0.5 for i in range(n)])}}, schema))
"""
    subprocess.run([python, "-c", script], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes-mb", default="0,1,10,50,200", help="table sizes in MB; 0: 5,000 rows")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as work:
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "PYICEBERG_CATALOG__BENCH__TYPE": "sql",
            "PYICEBERG_CATALOG__BENCH__URI": f"sqlite:///{work}/catalog.db",
            "PYICEBERG_CATALOG__BENCH__WAREHOUSE": f"file://{work}/warehouse",
        }
        env.pop("ICETAIL_LOCAL_MAX_BYTES", None)
        names = {size: f"t{str(size).replace('.', '_')}" for size in sizes}
        for size, name in names.items():
            make_table(args.python, env, name, size)
        results: dict[str, object] = {"load_before": os.getloadavg()}
        phases = subprocess.run(
            [args.python, "-c", PHASES, f"ns.{names[sizes[0]]}", f"{work}/phases.parquet"],
            env=env, capture_output=True, text=True, check=True,
        )
        started = time.perf_counter()
        subprocess.run([args.python, "-c", "pass"], env=env, check=True)
        results["phases_s"] = {"interpreter": round(time.perf_counter() - started, 3), **json.loads(phases.stdout)}
        print("phases:", results["phases_s"], flush=True)
        for size, name in names.items():
            seconds: dict[str, list[float]] = {"local": [], "spark": []}
            for round_number in range(1, args.rounds + 1):
                for engine in seconds:
                    argv = [args.python, "-m", "icetail", "changes", "--catalog", "bench", "--table", f"ns.{name}",
                            "--output", f"{work}/out-{engine}.parquet", "--engine", engine]
                    started = time.perf_counter()
                    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work)
                    seconds[engine].append(round(time.perf_counter() - started, 3))
                    if done.returncode:
                        raise SystemExit(done.stderr)
                local, spark = seconds["local"][-1], seconds["spark"][-1]
                print(f"{size} MB round {round_number}: local {local} s, spark {spark} s, "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
            bytes_read = sum(p.stat().st_size for p in Path(work, "warehouse").rglob(f"{name}/data/*.parquet"))
            results[f"{size} MB"] = {
                "parquet_bytes": bytes_read,
                "medians_s": {e: statistics.median(v) for e, v in seconds.items()},
                "rounds_s": seconds,
            }
        results["load_after"] = os.getloadavg()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
