"""The Iceberg mirror's apply cost: proportional to the files a group touches, not to the table.

    PYTHONPATH=$PWD .venv/bin/python -m bench.iceberg_mirror [--files 20,100,400] [--file-rows N]
        [--keys 1,10,100] [--rounds N] [--inserts N] [--workdir DIR]

Driver side only, as bench/pg_mirror.py (the Spark read is measured by the other cases): the
change rows start in Arrow, as the sink receives them; the target is a pyiceberg SQL catalog on
SQLite in `--workdir`, on local disk. Two cases:

* touched: a target of F files of `--file-rows` rows each (disjoint, sequential key ranges, as an
  append-only source makes them; one manifest), then `--rounds` groups of K key updates each
  (UPDATE_BEFORE/UPDATE_AFTER pairs), the keys either in one file ("clustered") or drawn over the
  whole key range ("spread"), each applied by `IcebergMirrorSink.write` (one overwrite commit).
  Printed per (F, K, layout): files read and rewritten, rows rewritten, seconds (median),
  changes/s and rows rewritten/s. Goal: for clustered keys the seconds do not grow with F.
* inserts: N INSERT change rows (one group) applied by the mirror into an empty target and into
  one holding 50 files of other keys, against a raw pyiceberg `Table.append` of the same rows into
  the same table (ratio = raw / mirror).

* tasks: a target of `--task-files` files of `--task-file-rows` rows; groups of K updates of keys
  drawn over the whole key range (K in `--task-keys`: every group touches many files), each
  rewritten once in the driver and once in Spark tasks (local[2]), alternating in the same run:
  files read and rewritten, rows rewritten, seconds (median) and rows rewritten/s per place, and
  driver / tasks. Then the crossover: groups of n keys in n distinct files (n in `--crossover`),
  seconds per place against the bytes the group reads (what DEFAULT_TASK_BYTES is chosen by).
* memory: the group sizes of `--memory-groups` (updates of spread keys, as --sink-commit-rows
  lets a group grow), each applied in a fresh process into a prepared target, in the driver and
  in Spark tasks: peak RSS of the process tree (driver Python, JVM, Python workers).

* manifests: `--groups` groups of one key update into a 20-file target, with pyiceberg's
  `commit.manifest-merge.enabled` off and on: the manifests left and the seconds per group, first
  and last tenth (each group's overwrite adds a manifest; pyiceberg merges only on merge appends).

Columns as bench/generate.py's (bench/pg_mirror.py's rows): id bigint (key), ts timestamptz,
k int, amount double, name string, category string, flag boolean, day date.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table import Table

from bench.pg_mirror import change_rows, data_rows, report
from bench.procs import RssSampler
from icetail.sinks.base import ChunkKey
from icetail.sinks.iceberg.mirror import tasks as iceberg_mirror_tasks
from icetail.sinks.iceberg.mirror.schema import target_schema
from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink

CATALOG = "benchmirror"


@dataclass(frozen=True)
class Applied:
    """One group's apply: what the sink read and replaced, and how long it took."""

    seconds: float
    files_read: int
    files_rewritten: int
    rows_rewritten: int  # rows of the rewritten files kept (read and written again)


def open_bench_catalog(workdir: Path, *, fresh: bool = True) -> SqlCatalog:
    """A SQL catalog in `workdir` (emptied unless `fresh` is False), configured by environment so the
    sink opens it by name."""
    if fresh:
        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / "warehouse").mkdir(parents=True)
    env = {"TYPE": "sql", "URI": f"sqlite:///{workdir}/catalog.db", "WAREHOUSE": f"file://{workdir}/warehouse"}
    for key, value in env.items():
        os.environ[f"PYICEBERG_CATALOG__{CATALOG.upper()}__{key}"] = value
    catalog = SqlCatalog(CATALOG, uri=env["URI"], warehouse=env["WAREHOUSE"])
    if fresh:
        catalog.create_namespace("b")
    return catalog


def bench_spark() -> object:
    """icetail's own local[2] session, its Python workers warmed by one job."""
    from icetail.reader.spark.session import spark_session

    # as `icetail run` on a local master: icetail's worker daemon (the task modules preloaded)
    daemon = {"spark.python.daemon.module": "icetail.reader.spark.daemon"}
    spark = spark_session(conf={"spark.master": "local[2]", **daemon})
    spark.range(0, 2, 1, 2).count()  # type: ignore[attr-defined]
    return spark


def load_note() -> str:
    return f"load average {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f} (1/5 min), {os.cpu_count()} cores"


def set_place(place: str) -> None:
    """Force the rewrite into the driver or into Spark tasks (the sink's threshold rule, bypassed)."""
    iceberg_mirror_tasks.DEFAULT_TASK_BYTES = -1 if place == "driver" else 0


def build_target(catalog: SqlCatalog, name: str, files: int, file_rows: int) -> Table:
    """The mirror's target holding `files` data files of `file_rows` sequential keys each, in one commit
    (none for 0 files)."""
    table = catalog.create_table(
        name, schema=target_schema(change_rows(data_rows(np.arange(1), 0), "INSERT").schema, ("id",))
    )
    arrow = table.schema().as_arrow()
    written = []
    commit_uuid, counter = uuid.uuid4(), itertools.count(0)
    for f in range(files):
        rows = data_rows(np.arange(f * file_rows, (f + 1) * file_rows), f).cast(arrow)
        written.extend(_dataframe_to_data_files(table.metadata, rows, table.io, commit_uuid, counter))
    if not written:
        return table
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in written:
            append.append_data_file(data_file)
    return catalog.load_table(name)


def update_group(ids: np.ndarray, seed: int) -> pa.Table:
    before, after = data_rows(ids, seed), data_rows(ids, seed + 1)
    return pa.concat_tables([change_rows(before, "UPDATE_BEFORE"), change_rows(after, "UPDATE_AFTER")])


def apply(sink: IcebergMirrorSink, changes: pa.Table) -> Applied:
    key = ChunkKey("bench", uuid.uuid4().hex[:8], 0, "s0", 0)
    started = time.perf_counter()
    sink.write(key, changes)
    seconds = time.perf_counter() - started
    last = sink.last
    assert last is not None
    kept = sum(int(f.record_count) for _, new in last.replaced for f in new)
    return Applied(seconds, last.files_read, len(last.replaced), kept)


def touched_case(workdir: Path, files: list[int], file_rows: int, keys: list[int], rounds: int) -> None:
    print(f"touched: a target of F files x {file_rows:,} rows; groups of K key updates, median of {rounds}")
    header = ["target files", "keys", "layout", "files read", "rewritten", "rows rewritten", "seconds", "changes/s"]
    print(f"| {' | '.join(header)} | rows rewritten/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(7)
    for f in files:
        catalog = open_bench_catalog(workdir)
        build_target(catalog, "b.t", f, file_rows)
        sink = IcebergMirrorSink(CATALOG, "b.t", consumer="bench")
        sink.bind(("id",), update_group(np.arange(1), 0).schema)
        for k, layout in itertools.product(keys, ("clustered", "spread")):
            if layout == "spread" and k == 1:
                continue  # one key is in one file either way
            runs = []
            for r in range(rounds):
                if layout == "clustered":
                    home = int(rng.integers(0, f))
                    ids = home * file_rows + rng.choice(file_rows, size=k, replace=False)
                else:
                    ids = rng.choice(f * file_rows, size=k, replace=False)
                runs.append(apply(sink, update_group(np.sort(ids), 100 + r)))
            median = statistics.median(a.seconds for a in runs)
            read = statistics.median(a.files_read for a in runs)
            rewritten = statistics.median(a.files_rewritten for a in runs)
            rows = statistics.median(a.rows_rewritten for a in runs)
            print(
                f"| {f} | {k} | {layout} | {read:g} | {rewritten:g} | {rows:,.0f} | {median:.3f} "
                f"| {k / median:,.0f} | {rows / median:,.0f} |"
            )
        table = catalog.load_table("b.t")
        manifests = len(table.current_snapshot().manifests(table.io))  # type: ignore[union-attr]
        print(f"  (F={f}: {manifests} manifests after {len(keys) * 2 - 1} x {rounds} groups)")
        sink.close()


def manifests_case(workdir: Path, groups: int, file_rows: int) -> None:
    """`groups` one-key groups into a 20-file target, with pyiceberg's manifest-merge properties off
    and on: manifests and seconds per group as the manifests pile up."""
    print(f"manifests: {groups} groups of 1 key update into a target of 20 files x {file_rows:,} rows")
    rng = np.random.default_rng(11)
    for merge in (False, True):
        catalog = open_bench_catalog(workdir)
        table = build_target(catalog, "b.t", 20, file_rows)
        if merge:
            with table.transaction() as tx:
                tx.set_properties({"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "10"})
        sink = IcebergMirrorSink(CATALOG, "b.t", consumer="bench")
        sink.bind(("id",), update_group(np.arange(1), 0).schema)
        seconds = [apply(sink, update_group(rng.integers(0, 20 * file_rows, 1), g)).seconds for g in range(groups)]
        table = catalog.load_table("b.t")
        manifests = len(table.current_snapshot().manifests(table.io))  # type: ignore[union-attr]
        files = len(table.inspect.files())
        tenth = max(1, groups // 10)
        first, last = statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:])
        print(
            f"  merge properties {'on' if merge else 'off'}: {manifests} manifests, {files} data files after "
            f"{groups} groups; median seconds per group: first {tenth} {first:.3f}, last {tenth} {last:.3f}"
        )
        sink.close()


def inserts_case(workdir: Path, n: int, rounds: int, held_files: int, file_rows: int) -> None:
    """N inserts by the mirror against a raw append, into an empty target and into one holding
    `held_files` files of other keys (the mirror then prunes by the new keys, to find duplicates)."""
    for held in (0, held_files):
        base = held * file_rows
        data = data_rows(np.arange(base, base + n), 1)
        changes = change_rows(data, "INSERT")
        mine, raw, read = [], [], []
        for _ in range(rounds):
            catalog = open_bench_catalog(workdir)
            build_target(catalog, "b.m", held, file_rows)
            sink = IcebergMirrorSink(CATALOG, "b.m", consumer="bench")
            sink.bind(("id",), changes.schema)
            applied = apply(sink, changes)
            mine.append(applied.seconds)
            read.append(applied.files_read)
            sink.close()
            table = build_target(catalog, "b.r", held, file_rows)
            rows = data.cast(table.schema().as_arrow())
            started = time.perf_counter()
            table.append(rows)
            raw.append(time.perf_counter() - started)
        where = f"a target of {held} files x {file_rows:,} rows" if held else "an empty target"
        report(f"inserts: {n:,} INSERT changes into {where}", n, mine, raw, "raw pyiceberg append", None)
        print(f"  (files the mirror read: {max(read)})")


def tasks_case(workdir: Path, files: int, file_rows: int, keys: list[int], rounds: int, crossover: list[int]) -> None:
    """Groups spread over many files: rewritten in the driver and in Spark tasks, alternating."""
    print(f"tasks: a target of {files} files x {file_rows:,} rows; groups of K spread key updates, median of {rounds}")
    print(f"  before: {load_note()}")
    catalog = open_bench_catalog(workdir)
    build_target(catalog, "b.t", files, file_rows)
    sizes = [f.file_size_in_bytes for f in (t.file for t in catalog.load_table("b.t").scan().plan_files())]
    print(f"  files: {statistics.mean(sizes) / 1e6:.2f} MB each on average")
    spark = bench_spark()
    sink = IcebergMirrorSink(CATALOG, "b.t", consumer="bench")
    sink.use_spark(lambda: spark)
    sink.bind(("id",), update_group(np.arange(1), 0).schema)
    rng = np.random.default_rng(5)
    set_place("tasks")
    apply(sink, update_group(np.sort(rng.choice(files * file_rows, 8, replace=False)), 1))  # warm the workers
    print("| keys | place | files read | rewritten | rows rewritten | seconds | rows rewritten/s | driver/tasks |")
    print("|---|---|---|---|---|---|---|---|")
    for k in keys:
        runs: dict[str, list[Applied]] = {"driver": [], "tasks": []}
        for r in range(rounds):
            for place in ("driver", "tasks") if r % 2 == 0 else ("tasks", "driver"):
                set_place(place)
                ids = np.sort(rng.choice(files * file_rows, size=k, replace=False))
                runs[place].append(apply(sink, update_group(ids, 100 + r)))
        medians = {p: statistics.median(a.seconds for a in runs[p]) for p in runs}
        for place, applied in runs.items():
            rows = statistics.median(a.rows_rewritten for a in applied)
            ratio = f"{medians['driver'] / medians['tasks']:.2f}x" if place == "tasks" else ""
            print(
                f"| {k} | {place} | {statistics.median(a.files_read for a in applied):g} "
                f"| {statistics.median(a.files_rewritten for a in applied):g} | {rows:,.0f} | {medians[place]:.2f} "
                f"| {rows / medians[place]:,.0f} | {ratio} |"
            )
    print(f"crossover: groups of n keys in n distinct files of {file_rows:,} rows, median of {rounds}")
    print("| files | MB read | driver s | tasks s | driver/tasks |")
    print("|---|---|---|---|---|")
    for n in crossover:
        seconds: dict[str, list[float]] = {"driver": [], "tasks": []}
        for r in range(rounds):
            for place in ("driver", "tasks") if r % 2 == 0 else ("tasks", "driver"):
                set_place(place)
                homes = rng.choice(files, size=n, replace=False)
                ids = np.sort(homes * file_rows + rng.integers(0, file_rows, n))
                seconds[place].append(apply(sink, update_group(ids, 200 + r)).seconds)
        d, t = statistics.median(seconds["driver"]), statistics.median(seconds["tasks"])
        print(f"| {n} | {n * statistics.mean(sizes) / 1e6:.1f} | {d:.3f} | {t:.3f} | {d / t:.2f}x |")
    print(f"  after: {load_note()}")
    sink.close()


def memory_case(workdir: Path, groups: list[int], target_rows: int, file_rows: int, places: list[str]) -> None:
    """Each group size in a fresh process (its own peak), in the driver and in Spark tasks."""
    print(f"memory: one group of N spread key updates into a target of {target_rows:,} rows ({file_rows:,} a file)")
    print(f"  before: {load_note()}")
    print("| updates (change rows) | place | files read | seconds | driver Python MB | JVM MB | workers MB | tree MB |")
    print("|---|---|---|---|---|---|---|---|")
    catalog = open_bench_catalog(workdir)
    build_target(catalog, "b.t", target_rows // file_rows, file_rows)  # each group rewrites it: same size after
    for n in groups:
        for place in places:
            command = [sys.executable, "-m", "bench.iceberg_mirror", "--workdir", str(workdir)]
            command += ["--cases", "memory-one", "--memory-one", f"{n},{target_rows},{place}"]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            got = json.loads(out)
            peak = {k: v / 2**20 for k, v in got["peak"].items()}
            print(
                f"| {n:,} ({2 * n:,}) | {place} | {got['files_read']} | {got['seconds']:.1f} | "
                f"{peak['driver_python']:,.0f} | {peak['jvm']:,.0f} | {peak['python_workers']:,.0f} "
                f"| {peak['total']:,.0f} |"
            )
    print(f"  after: {load_note()}")


def memory_one(workdir: Path, spec: str) -> None:
    """(child) Apply one group of N updates to the prepared target; print the peaks as JSON."""
    n, target_rows, place = spec.split(",")
    open_bench_catalog(workdir, fresh=False)
    spark = bench_spark() if place == "tasks" else None
    set_place(place)
    rng = np.random.default_rng(3)
    changes = update_group(np.sort(rng.choice(int(target_rows), size=int(n), replace=False)), 1)
    sink = IcebergMirrorSink(CATALOG, "b.t", consumer="bench")
    if spark is not None:
        sink.use_spark(lambda: spark)
    sink.bind(("id",), changes.schema)
    with RssSampler() as sampler:
        applied = apply(sink, changes)
        sampler.sample()
    sink.close()
    print(json.dumps({"peak": sampler.peak, "seconds": applied.seconds, "files_read": applied.files_read}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="20,100,400")
    parser.add_argument("--file-rows", type=int, default=2_000)
    parser.add_argument("--keys", default="1,10,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inserts", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "icetail-bench-mirror")
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--cases", default="touched,inserts,manifests")
    parser.add_argument("--task-files", type=int, default=200)
    parser.add_argument("--task-file-rows", type=int, default=10_000)
    parser.add_argument("--task-keys", default="100,2000")
    parser.add_argument("--crossover", default="1,2,4,8,16,32")
    parser.add_argument("--memory-groups", default="10000,100000,1000000")
    parser.add_argument("--memory-target-rows", type=int, default=2_000_000)
    parser.add_argument("--memory-places", default="driver,tasks")
    parser.add_argument("--memory-one", default="")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    if "memory-one" in cases:
        memory_one(args.workdir, args.memory_one)
        return
    if "tasks" in cases:
        keys = [int(v) for v in args.task_keys.split(",")]
        crossover = [int(v) for v in args.crossover.split(",")]
        tasks_case(args.workdir, args.task_files, args.task_file_rows, keys, args.rounds, crossover)
    if "memory" in cases:
        groups = [int(v) for v in args.memory_groups.split(",")]
        places = args.memory_places.split(",")
        memory_case(args.workdir, groups, args.memory_target_rows, args.task_file_rows, places)
    if "touched" in cases:
        files = [int(v) for v in args.files.split(",")]
        keys = [int(v) for v in args.keys.split(",")]
        touched_case(args.workdir, files, args.file_rows, keys, args.rounds)
    if "inserts" in cases:
        inserts_case(args.workdir, args.inserts, args.rounds, 50, args.file_rows)
    if "manifests" in cases:
        manifests_case(args.workdir, args.groups, args.file_rows)


if __name__ == "__main__":
    main()
