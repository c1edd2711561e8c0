"""What a refusal costs, whole process: `icetail --version`, `--help` and bad input, against `python -c pass`.

Issue 33 s2: everything that needs only the arguments answers in under 0.5 s on an idle machine,
and an error that needs the catalog in under 2 s. Each round runs every case once, interleaved,
in a fresh process from the console script users get; every round is printed, then the medians.

    .venv-spark4/bin/python -m bench.cases.cli_start --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = ["--catalog", "c", "--table", "ns.t", "--state", "sqlite:///state.db", "--sink", "parquet:///tmp/x"]


def cases(python: str, icetail: str) -> dict[str, list[str]]:
    return {
        "python -c pass": [python, "-c", "pass"],
        "--version": [icetail, "--version"],
        "--help": [icetail, "--help"],
        "unknown option": [icetail, "changes", "--tabel", "ns.t"],
        "bad --start": [icetail, "run", *RUN, "--start", "yesterday"],
        "bad sink URL": [icetail, "run", *RUN[:6], "--sink", "nope://x"],
        "unknown table (catalog)": [icetail, "plan", "--catalog", "bench", "--table", "ns.missing"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    icetail = str(Path(args.python).with_name("icetail"))
    with tempfile.TemporaryDirectory() as work:
        catalog_db = os.path.join(work, "catalog.db")
        subprocess.run(
            [args.python, "-c", f"from pyiceberg.catalog.sql import SqlCatalog; "
             f"SqlCatalog('bench', uri='sqlite:///{catalog_db}', warehouse='file://{work}').create_namespace('ns')"],
            check=True,
        )
        env = {
            **os.environ,
            "PYICEBERG_CATALOG__BENCH__URI": f"sqlite:///{catalog_db}",
            "PYICEBERG_CATALOG__BENCH__WAREHOUSE": f"file://{work}",
        }
        seconds: dict[str, list[float]] = {name: [] for name in cases(args.python, icetail)}
        cpu: dict[str, list[float]] = {name: [] for name in seconds}  # user + system: what load does not inflate
        for round_number in range(1, args.rounds + 1):
            for name, argv in cases(args.python, icetail).items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                subprocess.run(argv, cwd=work, env=env, capture_output=True, check=False)
                seconds[name].append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            timings = ", ".join(f"{n} {s[-1]:.3f} (cpu {cpu[n][-1]:.3f})" for n, s in seconds.items())
            print(f"round {round_number}: {timings}", flush=True)
    medians = {name: round(statistics.median(values), 3) for name, values in seconds.items()}
    cpu_medians = {name: round(statistics.median(values), 3) for name, values in cpu.items()}
    report = {"python": args.python, "load": os.getloadavg(), "medians_s": medians, "cpu_medians_s": cpu_medians}
    print(json.dumps({**report, "rounds_s": seconds, "rounds_cpu_s": cpu}))


if __name__ == "__main__":
    main()
