"""When staged chunks are committed together, and the offsets a group commits (no JVM)."""

from __future__ import annotations

import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.commit_group import ChunkGroup, Member, coalesced
from icetail.monitor.engine.config import GroupPolicy
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkKey
from icetail.state.checkpoint import ChunkCommit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def chunk(split: str, start: int, stop: int, rows: int, *, done: bool = False) -> Chunk:
    return Chunk(
        split_id=split,
        row_start_inclusive=start,
        next_row_exclusive=stop,
        batch=None,
        rows_decoded=stop - start,
        row_groups_read=1,
        bytes_read=0,
        done=done,
        staged=f"staged-{split}-{start}" if rows else None,
        change_counts=(("INSERT", rows),) if rows else (),
    )


def member(split: str, start: int, stop: int, rows: int, *, done: bool = False) -> Member:
    return Member(ChunkKey("c", "b1", int(split[-1]), split, start), chunk(split, start, stop, rows, done=done))


def test_a_group_is_full_at_its_row_bound_inclusive() -> None:
    group = ChunkGroup(GroupPolicy(min_rows=250, max_wait_seconds=60), Clock())
    assert not group.full()  # empty: nothing to commit
    for m in (member("s0", 0, 100, 100), member("s0", 100, 200, 100)):
        group.add(m.key, m.chunk)
        assert not group.full()
    m = member("s0", 200, 300, 50)
    group.add(m.key, m.chunk)
    assert group.full()
    assert [x.key.row_start_inclusive for x in group.take()] == [0, 100, 200]
    assert len(group) == 0 and not group.full()


def test_a_group_is_full_when_its_first_chunk_waited_the_interval() -> None:
    clock = Clock()
    group = ChunkGroup(GroupPolicy(min_rows=10**9, max_wait_seconds=5), clock)
    m = member("s0", 0, 10, 10)
    group.add(m.key, m.chunk)
    clock.now += 4.9
    m = member("s0", 10, 20, 10)
    group.add(m.key, m.chunk)
    assert not group.full()
    clock.now += 0.1
    assert group.full()
    group.take()
    m = member("s0", 20, 30, 10)
    group.add(m.key, m.chunk)  # a new group waits from its own first chunk
    assert not group.full()


def test_a_group_is_full_at_its_chunk_bound_whatever_the_rows() -> None:
    group = ChunkGroup(GroupPolicy(min_rows=10**9, max_wait_seconds=60, max_chunks=3), Clock())
    for start in range(3):
        m = member("s0", start, start + 1, 0)  # chunks without change rows count too
        group.add(m.key, m.chunk)
    assert group.full()


@pytest.mark.parametrize(
    ("rows", "seconds", "groups"), [(1_000_000, 10.0, True), (0, 10.0, False), (1, 10.0, False), (100, 0.0, False)]
)
def test_a_policy_bound_of_zero_or_one_row_means_a_commit_per_chunk(rows: int, seconds: float, groups: bool) -> None:
    assert GroupPolicy(rows, seconds).groups is groups


@pytest.mark.parametrize(
    ("rows", "seconds", "flag"), [(-1, 1.0, "--sink-commit-rows"), (1, -1.0, "--sink-commit-interval")]
)
def test_negative_bounds_are_refused_naming_the_flag(rows: int, seconds: float, flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        GroupPolicy(rows, seconds)


def test_a_group_commits_each_split_once_at_its_last_chunk_with_all_its_rows() -> None:
    members = [
        member("s0", 0, 100, 40),
        member("s1", 0, 100, 0),
        member("s0", 100, 200, 30, done=True),
        member("s1", 100, 150, 5, done=True),
    ]
    tokens: dict[ChunkKey, str | None] = {members[0].key: "7", members[2].key: "7", members[3].key: "7"}
    assert coalesced(members, tokens) == [
        ChunkCommit("s0", next_row_exclusive=200, rows_in_chunk=70, done=True, sink_token="7"),
        ChunkCommit("s1", next_row_exclusive=150, rows_in_chunk=5, done=True, sink_token="7"),
    ]


def test_a_split_whose_last_chunk_has_no_rows_keeps_the_token_of_its_last_written_chunk() -> None:
    members = [member("s0", 0, 100, 40), member("s0", 100, 200, 0, done=True)]
    commits = coalesced(members, {members[0].key: "9"})
    assert commits == [ChunkCommit("s0", next_row_exclusive=200, rows_in_chunk=40, done=True, sink_token="9")]
