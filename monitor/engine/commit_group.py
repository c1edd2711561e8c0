"""Staged chunks made visible together: one sink commit and one offset commit for several chunks.

Why: an Iceberg sink commit is a snapshot (manifest, manifest list, metadata file, catalog
update). One per chunk costs ~10 ms of driver CPU each and leaves the sink table with one
snapshot per small source file. Grouping keeps exactly-once as it is: the group's chunks are
committed to the sink first (one snapshot holding all their chunk ids, found whole or not at all
on a replay) and their offsets to the state second, in one transaction. What it changes is what a
crash re-reads: at most the group in flight (bounded by `GroupPolicy`), where a commit per chunk
re-reads at most the chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from icetail.monitor.engine.config import GroupPolicy
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkKey
from icetail.state.checkpoint import ChunkCommit


@dataclass(frozen=True)
class Member:
    """A read chunk waiting in a group, with the key it is delivered under."""

    key: ChunkKey
    chunk: Chunk


class ChunkGroup:
    """The staged chunks read since the last commit, in delivery order."""

    def __init__(self, policy: GroupPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._members: list[Member] = []
        self._rows = 0
        self._opened_at = 0.0

    def __len__(self) -> int:
        return len(self._members)

    def add(self, key: ChunkKey, chunk: Chunk) -> None:
        if not self._members:
            self._opened_at = self._clock()
        self._members.append(Member(key, chunk))
        self._rows += chunk.row_count

    def full(self) -> bool:
        """Whether the group must be committed now (a bound of its policy is reached)."""
        policy = self.policy
        return bool(self._members) and (
            self._rows >= policy.min_rows
            or len(self._members) >= policy.max_chunks
            or self._clock() - self._opened_at >= policy.max_wait_seconds
        )

    def take(self) -> list[Member]:
        """The members, in order; the group is empty afterwards."""
        members, self._members, self._rows = self._members, [], 0
        return members


def coalesced(members: Sequence[Member], tokens: dict[ChunkKey, str | None]) -> list[ChunkCommit]:
    """The offset commits of a group: one per split (the store takes a split once per transaction),
    at the split's last chunk, with the rows of all its chunks and its last token."""
    by_split: dict[str, ChunkCommit] = {}
    for member in members:
        chunk = member.chunk
        before = by_split.get(chunk.split_id)
        token = tokens.get(member.key)
        by_split[chunk.split_id] = ChunkCommit(
            split_id=chunk.split_id,
            next_row_exclusive=chunk.next_row_exclusive,
            rows_in_chunk=chunk.row_count + (before.rows_in_chunk if before is not None else 0),
            done=chunk.done,
            sink_token=token if token is not None or before is None else before.sink_token,
        )
    return list(by_split.values())
