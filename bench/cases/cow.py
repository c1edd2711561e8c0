"""Case `cow`: a copy-on-write DELETE, 90% carry-overs removed by icetail's reconcile, against Java's changelog."""

from __future__ import annotations

from bench import generate as gen
from bench.harness import Context, interleaved, java
from bench.readers import read_icetail, read_java_changelog, read_raw
from bench.results import CaseResult, ratio


def case_cow(ctx: Context) -> CaseResult:
    result = CaseResult("cow")
    cat, scale = ctx.catalog, ctx.scale
    gen.create_table(cat, "cow", mode="copy-on-write")
    gen.seed_snapshot(cat, "cow", ctx.data)
    data_snapshot = gen.add_files(cat, "cow", ctx.data.files)
    cutoff = scale.cow_files * scale.rows_per_file
    snapshot = gen.spark_delete(cat, "cow", f"id % 10 = 7 AND id >= 0 AND id < {cutoff}")
    table = cat.load_table("cow")
    from icetail.monitor.planning.planner import Planner

    plan = Planner(table).plan(data_snapshot, snapshot)
    touched = sorted({t.data_file.path for t in plan.tasks})
    rows_in = sum(t.data_file.record_count for t in plan.tasks)
    result.notes.append(
        f"DELETE of 10% of the rows of {scale.cow_files} files ({cutoff:,} rows) rewrote them: "
        f"{sum(t.kind.name == 'REMOVED' for t in plan.tasks)} removed + "
        f"{sum(t.kind.name == 'ADDED' for t in plan.tasks)} added files, {rows_in:,} rows to read, "
        "90% of them carry-overs"
    )
    read_icetail(table, data_snapshot, snapshot, ctx.spark)
    t = interleaved(
        {
            "icetail": lambda: read_icetail(table, data_snapshot, snapshot, ctx.spark),
            "raw_pyarrow": lambda: read_raw(touched),
            "java_changelog": java(ctx, lambda: read_java_changelog(cat, "cow", data_snapshot, snapshot, rows_in)),
        },
        scale.repeat,
    )
    icetail, raw, java_t = t["icetail"], t["raw_pyarrow"], t["java_changelog"]
    expected = cutoff // 10
    if icetail.rows_out != expected:
        result.notes.append(f"icetail returned {icetail.rows_out} rows, expected {expected} DELETEs")
    if java_t.rows_out not in (-1, 0, expected):
        result.notes.append(f"Java changelog returned {java_t.rows_out} rows, expected {expected}")
    result.timings = dict(t)
    result.ratios = {
        "vs_raw_pyarrow": ratio(raw, icetail),
        "vs_java_changelog": ratio(java_t, icetail),
        "cpu/vs_raw_pyarrow": ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"]),
    }
    return result
