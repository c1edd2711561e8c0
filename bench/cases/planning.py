"""Case `planning`: planning one new snapshot against history length and pyiceberg's full plan."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import generate as gen
from bench.harness import Context, log
from bench.results import CaseResult, Goal, ratio


def case_planning(ctx: Context) -> CaseResult:
    from icetail.monitor.planning.planner import Planner

    result = CaseResult("planning")
    cat, scale = ctx.catalog, ctx.scale
    reps = 200 if scale.name != "tiny" else 3
    full_reps = 5 if scale.name != "tiny" else 1
    per_history: dict[int, dict[str, Any]] = {}
    built: dict[int, tuple[str, Any, int, int, float]] = {}
    for history in scale.history:
        name = f"hist{history}"
        log(f"  planning: building {name} ({history} snapshots, {scale.history_entries} entries)")
        started = time.perf_counter()
        table = gen.build_history(cat, name, history, scale.history_entries, log=log)
        parent = table.current_snapshot().snapshot_id
        location = gen.local_path(table.location())
        gen.fast_append_fake(
            table, [f"file://{location}/data/new-{j:03d}.parquet" for j in range(scale.new_snapshot_files)]
        )
        table = cat.load_table(name)
        built[history] = (name, table, parent, table.current_snapshot().snapshot_id, time.perf_counter() - started)
    # every history planned once per round, round after round: other processes' load hits all alike
    ice_times: dict[int, list[float]] = {h: [] for h in built}
    manifests_read: dict[int, int] = {}
    for _ in range(reps):
        for history, (_, table, parent, new, _) in built.items():
            t0 = time.perf_counter()
            plan = Planner(table).plan(parent, new)  # a fresh Planner each time: nothing cached
            ice_times[history].append(time.perf_counter() - t0)
            manifests_read[history] = plan.manifests_read
            assert len(plan.tasks) == scale.new_snapshot_files
    for history, (name, table, _parent, new, build_s) in built.items():
        full_times, full_files = [], 0
        for _ in range(full_reps):  # a freshly loaded table each time: pyiceberg's caches are per FileIO
            fresh = cat.load_table(name)
            t0 = time.perf_counter()
            full_files = len(list(fresh.scan(snapshot_id=new).plan_files()))
            full_times.append(time.perf_counter() - t0)
        times = ice_times[history]
        ice, full = statistics.median(times), statistics.median(full_times)
        manifests = len(table.current_snapshot().manifests(table.io))
        per_history[history] = {
            "icetail_plan_s": round(ice, 5),
            "icetail_plan_min_s": round(min(times), 5),
            "icetail_plan_p95_s": round(sorted(times)[int(0.95 * (len(times) - 1))], 5),
            "icetail_manifests_read": manifests_read[history],
            "pyiceberg_full_plan_s": round(full, 5),
            "pyiceberg_full_files": full_files,
            "manifests_in_list": manifests,
            "build_s": round(build_s, 1),
        }
        result.ratios[f"h{history}/full_vs_icetail"] = ratio(full, ice)
    result.timings = {f"history_{h}": v for h, v in per_history.items()}
    lo, hi = min(scale.history), max(scale.history)
    growth = round(per_history[hi]["icetail_plan_s"] / per_history[lo]["icetail_plan_s"], 3)
    result.ratios[f"icetail_h{hi}_vs_h{lo}"] = growth
    # the minimum of the repetitions is the estimate least disturbed by other processes
    result.ratios[f"icetail_h{hi}_vs_h{lo}_min"] = round(
        per_history[hi]["icetail_plan_min_s"] / per_history[lo]["icetail_plan_min_s"], 3
    )
    cheaper = result.ratios[f"h{hi}/full_vs_icetail"]
    result.goals = [
        Goal(f"planning 1 new snapshot at {hi} vs {lo} snapshots of history", "<= 1.5x", growth, growth <= 1.5),
        Goal(
            f"planning 1 new snapshot vs pyiceberg full-scan plan (at {hi})", ">= 20x cheaper", cheaper, cheaper >= 20
        ),
    ]
    return result
