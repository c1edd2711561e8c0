"""Case `mor`: a DELETE snapshot's changes (position deletes, deletion vectors, equality deletes)."""

from __future__ import annotations

from typing import Any

from bench import generate as gen
from bench.harness import Context, interleaved, java, log
from bench.readers import read_icetail, read_icetail_in_tasks, read_java_snapshot, read_raw
from bench.results import CaseResult, Goal, ratio


def _mor_table(ctx: Context, name: str, *, format_version: int) -> tuple[int, int]:
    """A table with the whole data set in one snapshot after the seed; returns (seed, data snapshot)."""
    gen.create_table(ctx.catalog, name)
    seed = gen.seed_snapshot(ctx.catalog, name, ctx.data)
    data = gen.add_files(ctx.catalog, name, ctx.data.files)
    if format_version == 3:
        gen.upgrade_to_v3(ctx.catalog, name)
    return seed, data


def _delete_kinds(table: Any, from_id: int, to_id: int) -> dict[str, int]:
    """Delete files added by the snapshot, by kind (from icetail's plan: pyiceberg refuses equality deletes)."""
    from icetail.monitor.planning.planner import Planner

    files = {d.path: d for t in Planner(table).plan(from_id, to_id).tasks for d in t.deletes_after}
    kinds: dict[str, int] = {}
    for d in files.values():
        key = f"{d.content.name.lower()}/{d.file_format.lower()}"
        kinds[key] = kinds.get(key, 0) + 1
    return kinds


def case_mor(ctx: Context) -> CaseResult:
    result = CaseResult("mor")
    cat, scale = ctx.catalog, ctx.scale
    variants = [
        ("pos_v2", 2, "10% position deletes (v2, Spark SQL DELETE merge-on-read)", 0.7),
        ("dv_v3", 3, "10% deletion vectors (v3, Spark SQL DELETE merge-on-read)", 0.7),
        ("eq_v2", 2, "1% equality deletes on id (v2, Java RowDelta)", 0.5),
    ]
    for name, version, label, target in variants:
        log(f"  mor/{name}: building")
        _, data_snapshot = _mor_table(ctx, name, format_version=version)
        if name == "eq_v2":
            import numpy as np

            ids = np.arange(0, scale.rows, dtype=np.int64)
            delete_snapshot = gen.commit_equality_deletes(cat, name, ids[ids % 100 == 13])
            expected = int((ids % 100 == 13).sum())
        else:
            delete_snapshot = gen.spark_delete(cat, name, "id % 10 = 7")
            expected = scale.rows // 10
        table = cat.load_table(name)
        kinds = _delete_kinds(table, data_snapshot, delete_snapshot)
        log(f"  mor/{name}: measuring (delete files {kinds})")
        read_icetail(table, data_snapshot, delete_snapshot, ctx.spark)  # warm-up: page cache, delete cache
        read_icetail_in_tasks(table, data_snapshot, delete_snapshot, ctx.spark)
        live = scale.rows - expected
        t = interleaved(
            {
                "icetail": lambda t=table, a=data_snapshot, b=delete_snapshot: read_icetail_in_tasks(
                    t, a, b, ctx.spark
                ),
                "icetail_to_driver": lambda t=table, a=data_snapshot, b=delete_snapshot: read_icetail(
                    t, a, b, ctx.spark
                ),
                "raw_pyarrow": lambda: read_raw(ctx.data.files),
                "java_snapshot": java(
                    ctx, lambda n=name, s=delete_snapshot, r=live: read_java_snapshot(ctx.spark, cat.fq(n), s, r)
                ),
            },
            scale.repeat,
        )
        icetail, raw, java_t = t["icetail"], t["raw_pyarrow"], t["java_snapshot"]
        for reader in ("icetail", "icetail_to_driver"):
            if t[reader].rows_out != expected:
                result.notes.append(f"{name}: {reader} returned {t[reader].rows_out} rows, expected {expected}")
        icetail.extra["delete_files"] = kinds
        result.timings[f"{name}/icetail"] = icetail
        result.timings[f"{name}/icetail_to_driver"] = t["icetail_to_driver"]
        result.ratios[f"{name}/to_driver/vs_raw_pyarrow"] = ratio(raw, t["icetail_to_driver"])
        result.timings[f"{name}/raw_pyarrow"] = raw
        result.timings[f"{name}/java_snapshot"] = java_t
        value = ratio(raw, icetail)
        result.ratios[f"{name}/vs_raw_pyarrow"] = value
        result.ratios[f"{name}/vs_java_snapshot"] = ratio(java_t, icetail)
        result.ratios[f"{name}/cpu/vs_raw_pyarrow"] = ratio(raw.extra["cpu_s"], icetail.extra["cpu_s"])
        goal_target = f">= {target}x" + ("" if name != "dv_v3" else " (same bar as v2 position deletes)")
        result.goals.append(Goal(f"{label} vs raw decode", goal_target, value, value >= target))
    return result
