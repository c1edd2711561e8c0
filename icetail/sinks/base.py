"""The sink contract: where committed change rows go.

Exactly-once delivery needs a sink write that is idempotent per chunk: the pipeline writes a
chunk to the sink first and commits its row offset to the state second, so after a crash
between the two the same chunk (same key, same rows) is written again and must not duplicate.
Sinks that cannot promise that (`exactly_once = False`) deliver at least once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa


def file_safe(text: str) -> str:
    """`text` as it may appear in a file or object name: anything but letters, digits, `_.-` becomes `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


@dataclass(frozen=True)
class SplitSlot:
    """A split's place in its batch: what every chunk key of the split shares."""

    consumer: str
    batch_id: str
    split_index: int  # the split's position in its batch

    def chunk_key(self, split_id: str, row_start_inclusive: int) -> ChunkKey:
        return ChunkKey(self.consumer, self.batch_id, self.split_index, split_id, row_start_inclusive)


@dataclass(frozen=True)
class ChunkKey:
    """Identity of one delivered chunk; equal keys always carry identical rows.

    `split_index` is the split's position in its batch, so names sort in delivery order.
    """

    consumer: str
    batch_id: str
    split_index: int
    split_id: str
    row_start_inclusive: int

    @property
    def name(self) -> str:
        """A file-name-safe id, unique per consumer, sorting in delivery order."""
        return f"{file_safe(self.consumer)}-{self.batch_id}-{self.split_index:06d}-{self.row_start_inclusive:012d}"


@runtime_checkable
class Sink(Protocol):
    """Receives the change rows of committed chunks, in delivery order."""

    exactly_once: bool

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """Deliver `rows` (never empty) idempotently per `key`; return a token stored with the offset."""
        ...

    def close(self) -> None:
        """Flush and release resources; idempotent."""
        ...


@runtime_checkable
class CommitFencedSink(Protocol):
    """A sink whose commit may end long after the pipeline checked its lease (a database transaction
    applying many rows): it calls `check` once more just before its COMMIT, so that no commit of a
    replica cut off from the store outlives the lease (issue 35). `check(what)` raises a transient
    error once the lease's deadline passed; it does no I/O."""

    def fence_commits(self, check: Callable[[str], None]) -> None:
        """Call `check(what)` before every commit from now on."""
        ...


@runtime_checkable
class ChunkStager(Protocol):
    """The part of a sink that runs inside Spark tasks: it must pickle, and write invisibly."""

    def stage(self, key: ChunkKey, rows: pa.Table) -> str:
        """Write `rows` where readers cannot see them yet; return where (for `commit_staged`)."""
        ...


@runtime_checkable
class StagingSink(Sink, Protocol):
    """A sink whose chunks are written by the Spark task that read them, so rows never cross to
    the driver; the driver only makes a staged chunk visible, in delivery order, before its offset
    is committed. Both steps are idempotent per chunk key, so exactly-once holds as for `write`.
    """

    def stager(self, schema: pa.Schema) -> ChunkStager | None:
        """The task-side writer for a batch of change rows of `schema`; None: write from the driver."""
        ...

    def commit_staged(self, key: ChunkKey, staged: str) -> str | None:
        """Make the staged chunk visible under its final name; return the token."""
        ...


@runtime_checkable
class GroupCommitSink(StagingSink, Protocol):
    """A staging sink for which each commit is a costly, lasting thing (an Iceberg snapshot), so the
    pipeline makes several staged chunks visible in one commit. A group is visible whole or not at
    all, and each of its chunks stays idempotent by its key: a replay regrouped differently is
    still written once.
    """

    def commit_staged_group(self, staged: Sequence[tuple[ChunkKey, str]]) -> list[str]:
        """Make the staged chunks visible in one commit, in order; the token of each."""
        ...
