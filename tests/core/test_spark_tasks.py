"""How a wave of splits is cut into Spark tasks: contiguous, balanced by bytes, deterministic."""

from __future__ import annotations

from reader.spark import SplitRequest, group_for_tasks
from state.model import ChangeKind, ChangeSplit, ChangeTask, CommitInfo, DataFileRef

COMMIT = CommitInfo(1, None, "append", 0, 1, 0)


def _wave(sizes: list[int]) -> list[SplitRequest]:
    data_file = DataFileRef("file:///t/data/a.parquet", "PARQUET", 10 * len(sizes), sum(sizes), 0, "()", 1)
    task = ChangeTask(data_file, ChangeKind.ADDED, COMMIT)
    return [SplitRequest(ChangeSplit(task, i, i + 1, 10, size)) for i, size in enumerate(sizes)]


def _sizes(groups: list[list[tuple[int, SplitRequest]]]) -> list[list[int]]:
    return [[request.split.estimated_bytes for _, request in group] for group in groups]


def test_every_split_once_in_order_within_the_task_bound() -> None:
    for sizes, max_tasks in [([1] * 20, 4), ([5, 1, 9, 2, 7, 3, 8], 3), ([4] * 3, 8), ([1], 1), ([3, 3], 1)]:
        wave = _wave(sizes)
        groups = group_for_tasks(wave, max_tasks)
        flat = [index for group in groups for index, _ in group]
        assert flat == list(range(len(wave)))  # contiguous runs, concatenated in wave order
        assert [request for group in groups for _, request in group] == wave
        assert 1 <= len(groups) <= min(max_tasks, len(wave))
        assert all(groups)
        assert group_for_tasks(wave, max_tasks) == groups  # same wave, same tasks


def test_equal_splits_spread_evenly_and_a_big_split_gets_a_task_of_its_own() -> None:
    assert _sizes(group_for_tasks(_wave([1] * 20), 4)) == [[1] * 5] * 4
    assert _sizes(group_for_tasks(_wave([100, 1, 1, 1, 1, 1]), 2)) == [[100], [1, 1, 1, 1, 1]]
    assert _sizes(group_for_tasks(_wave([1, 1, 1, 100]), 2)) == [[1, 1, 1], [100]]


def test_empty_wave_has_no_tasks() -> None:
    assert group_for_tasks([], 4) == []
