"""The report: machine facts, each case's figures and the summary, printed and as JSON."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.results import CaseResult, Goal, Timing


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


def jsonable(value: Any) -> Any:
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
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def print_case(result: CaseResult) -> None:
    print(f"\n== {result.case} ({result.seconds:.1f}s; load average {result.load[0]} -> {result.load[1]})", flush=True)
    for name, timing in result.timings.items():
        if isinstance(timing, Timing):
            rate = f"{timing.rows_per_second / 1e6:8.2f} M rows/s" if timing.rows_in else ""
            print(f"  {name:28s} {timing.seconds:9.3f} s  {rate}  out={timing.rows_out:,}")
        else:
            print(f"  {name:28s} {json.dumps(jsonable(timing))}")
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
