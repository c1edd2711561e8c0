"""Readers: icetail's paths (to the driver, rows dropped in the tasks, diagnostics) and the baselines.

Each returns a `Timing` of one read; the cases interleave them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from bench import generate as gen
from bench.results import Timing


def read_icetail(table: Any, from_id: int | None, to_id: int, spark: Any, **options: Any) -> Timing:
    """icetail's read of (from, to], every row returned to the driver (`iter_changes`)."""
    from icetail.monitor.engine.api import iter_changes

    return _timed_plan(
        table, from_id, to_id, lambda plan: sum(b.num_rows for b in iter_changes(table, plan, spark=spark, **options))
    )


def read_icetail_in_tasks(table: Any, from_id: int | None, to_id: int, spark: Any) -> Timing:
    """icetail's read with the rows dropped inside the Spark tasks (icetail.sinks.python.discard).

    The path of the staging sinks (parquet, Iceberg), minus their writes; the Java baselines
    also drop their rows in the tasks (Spark's `noop` sink). Nothing is reconciled, so use it
    only where reconciling changes nothing (appends, deletes); the cases check the row counts.
    """
    timing = _timed_plan(table, from_id, to_id, lambda plan: rows_dropped_in_tasks(table, plan, spark))
    timing.extra["rows"] = "dropped in the tasks"
    return timing


def _timed_plan(table: Any, from_id: int | None, to_id: int, read: Callable[[Any], int]) -> Timing:
    """Plan (from, to] and `read` the plan; the time of both, planning also on its own."""
    from icetail.monitor.planning.planner import Planner

    started = time.perf_counter()
    plan = Planner(table).plan(from_id, to_id)
    planned = time.perf_counter()
    out = read(plan)
    seconds = time.perf_counter() - started
    rows_in = sum(t.data_file.record_count for t in plan.tasks)
    return Timing(
        seconds,
        rows_in,
        out,
        {"plan_s": round(planned - started, 4), "splits": len(plan.splits), "tasks": len(plan.tasks)},
    )


def rows_dropped_in_tasks(table: Any, plan: Any, spark: Any) -> int:
    """Run `plan` on Spark with a stager that drops every chunk's rows; the change rows counted."""
    from icetail.reader.changes.read_setup import read_context
    from icetail.reader.spark.payloads import SplitRequest
    from icetail.reader.spark.waves import run_splits
    from icetail.sinks.base import SplitSlot
    from icetail.sinks.python.discard import DiscardStager

    context = read_context(table, plan.schema_id, plan.tasks)
    requests = [SplitRequest(split, 0, SplitSlot("bench", "tasks", i)) for i, split in enumerate(plan.splits)]
    return sum(chunk.row_count for chunk in run_splits(spark, context, requests, stager=DiscardStager()))


def read_splits_inprocess(table: Any, from_id: int | None, to_id: int, *, encode: bool = False) -> Timing:
    """Diagnostic: icetail's split reader run in this process, one split after another (no Spark).

    With `encode`, each chunk also makes the Arrow IPC round trip the Spark path makes.
    """
    from icetail.reader.changes.read_setup import read_context
    from icetail.reader.spark.payloads import decode, encode
    from icetail.reader.split.read import read_split

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        out = 0
        for split in plan.splits:
            for chunk in read_split(context, split):
                if encode:
                    chunk = decode(encode(chunk))
                out += chunk.batch.num_rows if chunk.batch is not None else 0
        return out

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["encode"] = encode
    return timing


def _pool_split(context: Any, split: Any) -> list[Any]:
    from icetail.reader.spark.payloads import encode
    from icetail.reader.split.read import read_split

    return [encode(chunk) for chunk in read_split(context, split)]


def read_pool(table: Any, from_id: int | None, to_id: int, executor: Any) -> Timing:
    """Experiment (P1 option 3): the split reader in a local process pool, in plan order, no Spark."""
    from icetail.reader.changes.read_setup import read_context
    from icetail.reader.spark.payloads import decode

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        out = 0
        for payloads in executor.map(_pool_split, [context] * len(plan.splits), plan.splits):
            for payload in payloads:
                chunk = decode(payload)
                out += chunk.batch.num_rows if chunk.batch is not None else 0
        return out

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["mode"] = "pool"
    return timing


def _thread_split(context: Any, split: Any) -> list[Any]:
    from icetail.reader.split.read import read_split

    return list(read_split(context, split))


def read_threads(table: Any, from_id: int | None, to_id: int, executor: Any) -> Timing:
    """Experiment (P1 option 3, zero-copy): the split reader on a thread pool in the driver, plan order."""
    from icetail.reader.changes.read_setup import read_context

    def read(plan: Any) -> int:
        context = read_context(table, plan.schema_id, plan.tasks)
        chunk_lists = executor.map(_thread_split, [context] * len(plan.splits), plan.splits)
        return sum(c.batch.num_rows for chunks in chunk_lists for c in chunks if c.batch is not None)

    timing = _timed_plan(table, from_id, to_id, read)
    timing.extra["mode"] = "threads"
    return timing


def read_raw(paths: Iterable[str], *, threads: bool = True) -> Timing:
    """pyarrow decode of whole files, every column: the limit on this machine."""
    import pyarrow.parquet as pq

    paths = list(paths)
    started = time.perf_counter()
    rows = 0
    for path in paths:
        rows += pq.read_table(gen.local_path(path), use_threads=threads).num_rows
    return Timing(time.perf_counter() - started, rows, rows, {"files": len(paths), "threads": threads})


def read_pyiceberg(table: Any, snapshot_id: int) -> Timing:
    started = time.perf_counter()
    rows = 0
    for batch in table.scan(snapshot_id=snapshot_id).to_arrow_batch_reader():
        rows += batch.num_rows
    return Timing(time.perf_counter() - started, rows, rows)


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def read_java_incremental(spark: Any, fq: str, start_exclusive: int, end_inclusive: int, rows: int) -> Timing:
    """Java Iceberg's incremental append scan, every column decoded into Spark rows (noop sink)."""
    started = time.perf_counter()
    df = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", str(start_exclusive))
        .option("end-snapshot-id", str(end_inclusive))
        .load(fq)
    )
    _noop(df)
    return Timing(time.perf_counter() - started, rows, rows)


def read_java_snapshot(spark: Any, fq: str, snapshot_id: int, rows: int) -> Timing:
    started = time.perf_counter()
    _noop(spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(fq))
    return Timing(time.perf_counter() - started, rows, rows)


def read_java_changelog(catalog: Any, name: str, start_exclusive: int, end_inclusive: int, rows: int) -> Timing:
    """Java's create_changelog_view (carry-over rows removed) over (start, end], read to a noop sink."""
    view = f"bench_changes_{int(time.time() * 1000)}"
    started = time.perf_counter()
    catalog.sql(
        f"CALL {{cat}}.system.create_changelog_view(table => '{catalog.ident(name)}', changelog_view => '{view}', "
        f"options => map('start-snapshot-id', '{start_exclusive}', 'end-snapshot-id', '{end_inclusive}'))"
    ).collect()
    try:
        _noop(catalog.spark.table(view))
        out = catalog.spark.table(view).count() if rows < 5_000_000 else -1
    finally:
        catalog.spark.catalog.dropTempView(view)
    # the count is a second pass; keep it out of the time
    return Timing(time.perf_counter() - started, rows, out)


def snapshot_data_files(table: Any, snapshot_id: int) -> list[str]:
    return [t.file.file_path for t in table.scan(snapshot_id=snapshot_id).plan_files()]
