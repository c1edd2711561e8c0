"""Crash soak: `icetail run` SIGKILLed many times over a bigger table, then checked row by row.

The long form of tests/pipeline/test_crash.py. It builds a table of mixed snapshots (multi-file,
multi-row-group appends, copy-on-write deletes, an overwrite, a schema change) `--scale` times
the test's size, then runs

    icetail run --until-caught-up --max-snapshots-per-batch M --chunk-rows C ...

as a child process, SIGKILLing its process group (driver, Spark JVM, Python workers) `--kills`
times by a seeded schedule (early kills during start-up, store and planning; kills inside and
right after sink writes; random moments), and once more to completion. With --write-every N
another writer commits to the source table (an append, or a copy-on-write delete) after every
N-th kill, so restarts finish written-ahead batches of a table that moved on. The oracle is the
final table's whole change stream (`read_changes`). The sink must hold at least the committed
rows after every run and a sub-multiset of the oracle; at the end exactly the oracle (full rows,
with `_change_ordinal`, `_commit_snapshot_id`, `_commit_timestamp`), and a further run must
leave the sink untouched.

    .venv/bin/python bench/crash_soak.py --kills 40 --seed 7 --sink iceberg --state postgresql

Exit status 0 when exactly once held, 1 otherwise. Work files go to --workdir (a temporary
directory by default, removed unless --keep or a failure).
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pyarrow as pa  # noqa: E402

from tests.support.catalogs import new_catalog  # noqa: E402
from tests.support.compare import diff_report, is_submultiset, row_multiset  # noqa: E402
from tests.support.crash import Attempt, crash_loop, kill_schedule  # noqa: E402
from tests.support.processes import child_env, icetail_command  # noqa: E402
from tests.support.sinks import make_sink  # noqa: E402
from tests.support.stores import drop_state, new_state_url, pg_unavailable, view_state  # noqa: E402
from tests.support.tables import build_mixed_table, make_rows  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="SIGKILLs before the run left to finish (30)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill schedule (1)")
    parser.add_argument("--sink", choices=("parquet", "iceberg"), default="parquet")
    parser.add_argument("--state", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--scale", type=int, default=4, help="table size, in units of the test's table (4)")
    parser.add_argument("--chunk-rows", type=int, default=100)
    parser.add_argument("--max-snapshots-per-batch", type=int, default=2)
    parser.add_argument("--write-every", type=int, default=0, help="another writer commits after every N-th kill")
    parser.add_argument("--horizon", type=float, default=40.0, help="latest time-based kill, seconds (40)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args(argv)


def classify(attempt: Attempt, tmp_files: int) -> str:
    state = attempt.state
    if not attempt.killed:
        return "finished"
    if state is None or not state.exists:
        return "start-up (no consumer yet)"
    if tmp_files:
        return "inside a sink write"
    if state.inflight_batch is None:
        return "between batches"
    if attempt.sink_rows > state.committed_rows:
        return "sink written, offset not committed"
    return "batch in flight, sink and offsets agree"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.state == "postgresql" and (reason := pg_unavailable()):
        print(f"crash_soak: {reason}", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="icetail-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    source = new_catalog(work / "source", "soaksrc")
    table = build_mixed_table(source, "ns.events", scale=args.scale)
    print(f"table ns.events: {len(table.metadata.snapshots)} snapshots, built in {time.monotonic() - started:.1f}s")

    from icetail.monitor.engine.api import read_changes
    from icetail.reader.spark.session import spark_session

    spark = spark_session()

    (work / "state").mkdir(exist_ok=True)
    state_url = new_state_url(args.state, work / "state")
    sink = make_sink(args.sink, work)
    consumer = f"soak-{args.sink}-{args.state}"
    env = child_env([source] + ([sink.catalog] if sink.catalog is not None else []), work / "spark")
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", source.name,
        "--table", "ns.events",
        "--state", state_url,
        "--sink", sink.url,
        "--consumer", consumer,
        "--until-caught-up",
        "--max-snapshots-per-batch", str(args.max_snapshots_per_batch),
        "--chunk-rows", str(args.chunk_rows),
    ]  # fmt: skip
    schedule = kill_schedule(random.Random(args.seed), args.kills, horizon=args.horizon)
    stages: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    seen: list[tuple[Attempt, pa.Table | None]] = []  # sink contents after each run, checked at the end
    writes = 0

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        tmp_files = 0
        if sink.directory is not None and (sink.directory / "_tmp").exists():
            tmp_files = sum(1 for _ in (sink.directory / "_tmp").rglob("*.parquet"))
        stage = classify(attempt, tmp_files)
        stages[stage] += 1
        seen.append((attempt, rows))
        state = attempt.state
        if state is not None and state.exists and attempt.sink_rows < state.committed_rows:
            problems.append(
                f"after run {attempt.index}: sink holds {attempt.sink_rows} rows, fewer than the "
                f"{state.committed_rows} committed"
            )
        print(f"  {attempt.line()} [{stage}]", flush=True)

    def concurrent_write(attempt: Attempt) -> None:
        """Another writer commits while icetail is down: an append, or a delete every other time."""
        nonlocal writes
        if not args.write_every or (attempt.index + 1) % args.write_every:
            return
        writes += 1
        current = source.load("ns.events")
        if writes % 2:
            base = 1_000_000 + writes * 1_000
            current.append(make_rows(current.schema().as_arrow(), range(base, base + 300)))
        else:
            from pyiceberg.expressions import LessThan

            current.delete(LessThan("id", 10 + writes * 20))
        print(f"  (a concurrent writer committed snapshot {source.load('ns.events').metadata.current_snapshot_id})")

    loop_started = time.monotonic()
    ok = False
    try:
        report = crash_loop(
            cmd,
            env,
            state_url=state_url,
            consumer=consumer,
            sink=sink,
            schedule=schedule,
            logs=work / "logs",
            check=check,
            between=concurrent_write,
            final_timeout=1800,
        )
        loop_seconds = time.monotonic() - loop_started
        table = source.load("ns.events")
        oracle_started = time.monotonic()
        expected_table = read_changes(table, spark=spark)
        schema = expected_table.schema
        expected = row_multiset(expected_table, schema)
        print(f"oracle: {expected_table.num_rows} change rows in {time.monotonic() - oracle_started:.1f}s")
        for attempt, rows_then in seen:  # no row foreign or duplicated at any point
            got = row_multiset(rows_then, schema, partial=True)
            if not is_submultiset(got, expected):
                problems.append(f"after run {attempt.index}: {diff_report(expected, got)}")
        final = row_multiset(sink.read(), schema)
        if diff := diff_report(expected, final):
            problems.append(f"final sink: {diff}")
        state = view_state(state_url, consumer)
        if state.cursor != table.metadata.current_snapshot_id or state.inflight_batch is not None:
            problems.append(f"final state: {state}")
        before = sink.fingerprint()
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        if again.returncode != 0 or sink.fingerprint() != before:
            problems.append(f"the run after catching up changed the sink or failed: {again.stderr[-2000:]}")

        print()
        print(f"seed {args.seed}, sink {args.sink}, state {args.state}, scale {args.scale}")
        print(f"kills: {report.kills}, runs: {len(report.attempts) + 1}, crash loop {loop_seconds:.0f}s")
        for stage, count in stages.most_common():
            print(f"  {count:4d}  {stage}")
        print(f"concurrent writes: {writes}")
        print(f"change rows: {expected_table.num_rows} expected, {sum(final.values())} in the sink")
        ok = not problems
    finally:
        spark.stop()
        if args.state == "postgresql":
            drop_state(state_url)
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("exactly once: " + ("OK" if ok else "FAILED") + f" ({time.monotonic() - started:.0f}s in all)")
    if ok and not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work directory: {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
