"""Case `append`: an append-only range read by icetail against raw pyarrow, pyiceberg and Java."""

from __future__ import annotations

from bench import generate as gen
from bench.harness import Context, interleaved, java
from bench.readers import (
    read_icetail,
    read_icetail_in_tasks,
    read_java_incremental,
    read_pyiceberg,
    read_raw,
    read_splits_inprocess,
)
from bench.results import CaseResult, Goal, ratio


def case_append(ctx: Context) -> CaseResult:
    result = CaseResult("append")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "append")
    seed = gen.seed_snapshot(cat, "append", ctx.data)
    snaps = gen.load_files(cat, "append", ctx.data.files, scale.files_per_snapshot)
    table = cat.load_table("append")
    result.notes.append(f"{len(ctx.data.files)} files in {len(snaps)} append snapshots after a 10-row seed snapshot")
    # warm-up of both engines on the first added snapshot (Python workers, JIT, file cache)
    read_icetail(table, seed, snaps[0], ctx.spark)
    read_icetail_in_tasks(table, seed, snaps[0], ctx.spark)
    if not ctx.args.skip_java:
        read_java_incremental(ctx.spark, cat.fq("append"), seed, snaps[0], 0)
    t = interleaved(
        {
            "icetail": lambda: read_icetail_in_tasks(table, seed, snaps[-1], ctx.spark),
            "icetail_to_driver": lambda: read_icetail(table, seed, snaps[-1], ctx.spark),
            "raw_pyarrow": lambda: read_raw(ctx.data.files),
            "raw_pyarrow_1thread": lambda: read_raw(ctx.data.files, threads=False),
            "pyiceberg_scan": lambda: read_pyiceberg(table, snaps[-1]),
            "java_incremental": java(
                ctx, lambda: read_java_incremental(ctx.spark, cat.fq("append"), seed, snaps[-1], scale.rows)
            ),
            "diag_split_reader_no_spark": lambda: read_splits_inprocess(table, seed, snaps[-1]),
            "diag_split_reader_ipc_no_spark": lambda: read_splits_inprocess(table, seed, snaps[-1], encode=True),
        },
        scale.repeat,
    )
    icetail, raw, raw1, pyice, java_t, inproc = (
        t["icetail"],
        t["raw_pyarrow"],
        t["raw_pyarrow_1thread"],
        t["pyiceberg_scan"],
        t["java_incremental"],
        t["diag_split_reader_no_spark"],
    )
    assert icetail.rows_out == ctx.scale.rows, (icetail.rows_out, ctx.scale.rows)
    assert t["icetail_to_driver"].rows_out == ctx.scale.rows, (t["icetail_to_driver"].rows_out, ctx.scale.rows)
    result.timings = dict(t)
    result.notes.append(
        "icetail: rows dropped in the Spark tasks (the staging sinks' path; Java's baseline uses the noop sink); "
        "icetail_to_driver: every row returned to the driver as Arrow (iter_changes)"
    )
    result.ratios = {
        "vs_raw_pyarrow": ratio(raw, icetail),
        "to_driver/vs_raw_pyarrow": ratio(raw, t["icetail_to_driver"]),
        "to_driver/vs_java_incremental": ratio(java_t, t["icetail_to_driver"]),
        "vs_raw_pyarrow_1thread": ratio(raw1, icetail),
        "vs_pyiceberg_scan": ratio(pyice, icetail),
        "vs_java_incremental": ratio(java_t, icetail),
        "cpu/vs_raw_pyarrow": ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"]),
        "diag_raw_1thread_vs_split_reader_no_spark": ratio(raw1, inproc),
    }
    r, j = result.ratios["vs_raw_pyarrow"], result.ratios["vs_java_incremental"]
    result.goals = [
        Goal("append-only read vs raw pyarrow decode", ">= 0.8x", r, r >= 0.8),
        Goal("append-only read vs Java Iceberg Spark read", ">= 1.5x", j, j >= 1.5 if j == j else None),
    ]
    return result
