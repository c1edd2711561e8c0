"""Which way of delivering a sink gets (monitor/engine/delivery/choice.py), from what it implements,
and the test seam that does nothing unless a test installed a hook (icetail/kernel/seams.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from icetail.kernel import seams
from icetail.monitor.engine.config import GroupPolicy
from icetail.monitor.engine.delivery.choice import sink_writes
from icetail.monitor.engine.delivery.chunks import EachChunk, StagedGroups, WrittenGroups
from icetail.sinks.base import ChunkKey, ChunkStager

GROUPS = GroupPolicy(min_rows=1000, max_wait_seconds=5.0)
EVERY_CHUNK = GroupPolicy(min_rows=0, max_wait_seconds=0.0)


class ChunkSink:
    exactly_once = True

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        return None

    def close(self) -> None:
        pass


class StagingChunkSink(ChunkSink):
    def stager(self, schema: pa.Schema) -> ChunkStager | None:
        return None

    def commit_staged(self, key: ChunkKey, staged: str) -> str | None:
        return None


class GroupCommittingSink(StagingChunkSink):
    def commit_staged_group(self, staged: Sequence[tuple[ChunkKey, str]]) -> list[str]:
        return []


class GroupWritingSink(ChunkSink):
    def write_group(self, chunks: Sequence[tuple[ChunkKey, pa.Table]]) -> list[str | None]:
        return []


@pytest.mark.parametrize(
    ("sink", "policy", "writes"),
    [
        (ChunkSink(), GROUPS, EachChunk),
        (StagingChunkSink(), GROUPS, EachChunk),
        (GroupCommittingSink(), GROUPS, StagedGroups),
        (GroupCommittingSink(), EVERY_CHUNK, EachChunk),
        (GroupWritingSink(), GROUPS, WrittenGroups),
        (GroupWritingSink(), EVERY_CHUNK, EachChunk),
    ],
)
def test_a_sink_gets_the_writes_it_can_take(sink: ChunkSink, policy: GroupPolicy, writes: type[EachChunk]) -> None:
    assert sink_writes(sink, policy) is writes


def test_a_moment_without_a_hook_does_nothing_and_an_installed_hook_runs() -> None:
    moment = "test-delivery-choice"
    seams.reached(moment, lambda seconds: True)  # no hook: nothing happens
    seen: list[bool] = []
    seams.install(moment, lambda released: seen.append(released(0.0)))
    seams.reached(moment, lambda seconds: True)
    assert seen == [True]
