"""Split planning and lineage on pure values and a real pyiceberg table."""

from __future__ import annotations

import pyarrow as pa

from monitor.lineage import snapshot_by_id, snapshots_between
from monitor.planner import Planner, split_task
from state.model import ChangeKind, ChangeTask, CommitInfo, DataFileRef
from tests.core.conftest import SCHEMA, SmallTable

COMMIT = CommitInfo(1, None, "append", 0, 1, 0)


def _task(size: int, offsets: tuple[int, ...] | None) -> ChangeTask:
    return ChangeTask(DataFileRef("f.parquet", "PARQUET", 1000, size, 0, "()", 1, offsets), ChangeKind.ADDED, COMMIT)


def test_splits_follow_row_groups_and_cover_the_file() -> None:
    splits = split_task(_task(1000, (4, 200, 400, 600, 800)), target_split_bytes=450)
    assert [(s.row_group_start, s.row_group_end) for s in splits] == [(0, 2), (2, 4), (4, 5)]
    assert len({s.split_id for s in splits}) == 3


def test_small_or_unknown_layout_is_one_split() -> None:
    assert len(split_task(_task(100, (4, 50)), 1000)) == 1
    assert [(s.row_group_start, s.row_group_end) for s in split_task(_task(10_000, None), 100)] == [(0, None)]


def test_one_huge_row_group_still_gets_its_own_split() -> None:
    splits = split_task(_task(10_000, (4, 9000)), 100)
    assert [(s.row_group_start, s.row_group_end) for s in splits] == [(0, 1), (1, 2)]


def test_planning_reads_only_new_manifests_with_a_warm_cache(small_table: SmallTable) -> None:
    table = small_table.load()
    planner = Planner(table)
    planner.plan(None, None)
    table.append(pa.table({"id": [9], "v": ["z"]}, SCHEMA))
    table = small_table.load()
    planner.refresh(table)
    plan = planner.plan(small_table.snapshot_ids[-1], None)
    assert [c.operation for c in plan.commits] == ["append"]
    assert plan.manifests_read == 1  # only the manifest the new snapshot wrote
    assert [t.kind for t in plan.tasks] == [ChangeKind.ADDED]


def test_full_plan_reads_live_files(small_table: SmallTable) -> None:
    plan = Planner(small_table.load()).plan_full()
    assert {t.kind for t in plan.tasks} == {ChangeKind.ADDED}
    assert sum(t.data_file.record_count for t in plan.tasks) == 4


def test_snapshot_index_agrees_with_pyiceberg_and_follows_refreshed_metadata(small_table: SmallTable) -> None:
    table = small_table.load()
    for snapshot in table.metadata.snapshots:
        assert snapshot_by_id(table.metadata, snapshot.snapshot_id) is table.metadata.snapshot_by_id(
            snapshot.snapshot_id
        )
    assert snapshot_by_id(table.metadata, -1) is None
    old = table.metadata
    table.append(pa.table({"id": [9], "v": ["z"]}, SCHEMA))  # gives `table` new metadata
    fresh = small_table.load()
    new_id = fresh.metadata.current_snapshot_id
    assert new_id is not None
    assert snapshot_by_id(old, new_id) is None  # the old metadata object keeps its own view
    assert snapshot_by_id(table.metadata, new_id) is table.metadata.snapshot_by_id(new_id)
    assert snapshot_by_id(fresh.metadata, new_id) is fresh.metadata.snapshot_by_id(new_id)
    assert snapshots_between(fresh.metadata, None, new_id)[-1].snapshot_id == new_id
