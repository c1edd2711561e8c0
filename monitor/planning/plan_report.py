"""`icetail plan`: the job graph of a range, for people (text) and machines (--json)."""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from typing import Any

from icetail.kernel.model import ChangeSplit, ChangeTask, DeleteContent
from icetail.monitor.planning.planner import ChangePlan


def plan_summary(plan: ChangePlan) -> dict[str, Any]:
    snapshots = []
    # grouped once: a range of 5,000 snapshots and 100,000 tasks is not scanned once per snapshot
    tasks_of: dict[int, list[ChangeTask]] = defaultdict(list)
    splits_of: dict[int, list[ChangeSplit]] = defaultdict(list)
    for task in plan.tasks:
        tasks_of[task.commit.snapshot_id].append(task)
    for split in plan.splits:
        splits_of[split.task.commit.snapshot_id].append(split)
    for commit in plan.commits:
        tasks = tasks_of.get(commit.snapshot_id, [])
        splits = splits_of.get(commit.snapshot_id, [])
        deletes = {d.path: d for t in tasks for d in t.deletes_before + t.deletes_after}
        snapshots.append(
            {
                "snapshot_id": commit.snapshot_id,
                "parent_id": commit.parent_id,
                "ordinal": commit.ordinal,
                "operation": commit.operation,
                "committed_at": _iso(commit.timestamp_ms),
                "tasks_by_kind": dict(Counter(t.kind.value for t in tasks)),
                "data_files": len({t.data_file.path for t in tasks}),
                "data_bytes": sum(t.data_file.file_size_in_bytes for t in tasks),
                "delete_files_by_content": dict(Counter(d.content.value for d in deletes.values())),
                "splits": len(splits),
                "estimated_rows": sum(s.estimated_rows for s in splits),
            }
        )
    return {
        "table": plan.table,
        "branch": plan.branch,
        "from_tag": plan.from_tag,
        "to_tag": plan.to_tag,
        "from_snapshot_id_exclusive": plan.from_snapshot_id_exclusive,
        "to_snapshot_id_inclusive": plan.to_snapshot_id_inclusive,
        "schema_id": plan.schema_id,
        "snapshots": snapshots,
        "skipped_replace_snapshots": [
            {"snapshot_id": s.snapshot_id, "operation": s.operation, "committed_at": _iso(s.timestamp_ms)}
            for s in plan.skipped
        ],
        "totals": {
            "snapshots": len(plan.commits),
            "tasks": len(plan.tasks),
            "splits": len(plan.splits),
            "estimated_rows": sum(s.estimated_rows for s in plan.splits),
            "equality_delete_files": len(
                {
                    d.path
                    for t in plan.tasks
                    for d in t.deletes_after + t.deletes_before
                    if d.content == DeleteContent.EQUALITY
                }
            ),
            "manifests_read": plan.manifests_read,
            "files_pruned_by_filter": plan.files_pruned,
        },
    }


def format_plan(plan: ChangePlan) -> str:
    summary = plan_summary(plan)
    start = _bound(plan.from_snapshot_id_exclusive, plan.from_tag)
    bounds = f"({start}, {_bound(plan.to_snapshot_id_inclusive, plan.to_tag)}]"
    lines = [
        f"table {summary['table']} branch {plan.branch}: changes in {bounds} projected onto schema {plan.schema_id}",
        "  scan: monitor plans splits -> each split read with its deletes applied (merge-on-read; Spark tasks"
        " or in process: see engine) -> ordered chunks"
        " -> carry-over removal / update pairing per snapshot -> output",
    ]
    for snap in summary["snapshots"]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(snap["tasks_by_kind"].items())) or "no data changes"
        deletes = ", ".join(f"{k} {v}" for k, v in sorted(snap["delete_files_by_content"].items())) or "none"
        lines.append(
            f"  [{snap['ordinal']}] snapshot {snap['snapshot_id']} {snap['operation']} at {snap['committed_at']}: "
            f"files {kinds}; delete files {deletes}; {snap['splits']} splits, ~{snap['estimated_rows']} rows"
        )
    for skipped in summary["skipped_replace_snapshots"]:
        lines.append(f"  [-] snapshot {skipped['snapshot_id']} {skipped['operation']}: no row changes (skipped)")
    totals = summary["totals"]
    lines.append(
        f"  total: {totals['snapshots']} snapshots, {totals['tasks']} tasks, {totals['splits']} splits, "
        f"~{totals['estimated_rows']} rows, {totals['manifests_read']} manifests read"
        + (f", {plan.files_pruned} data files left out by --filter" if plan.files_pruned else "")
    )
    return "\n".join(lines)


def _bound(snapshot_id: int | None, tag: str | None) -> str:
    """`123` or, for a bound given by tag, `123 (tag v1)`."""
    return f"{snapshot_id} (tag {tag})" if tag else str(snapshot_id)


def _iso(timestamp_ms: int) -> str:
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc).isoformat(
        timespec="milliseconds"
    )
