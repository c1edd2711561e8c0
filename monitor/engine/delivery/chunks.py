"""How the read chunks of a batch reach the sink: one at a time, or held in groups committed together.

Chosen once, from what the sink can do (choice.py `sink_writes`):
- `EachChunk`: each chunk written (or its staged rows made visible) and its offset committed, in turn;
- `StagedGroups`: a group-committing sink's (Iceberg) staged chunks made visible in one sink commit;
- `WrittenGroups`: a group-writing sink's (the PostgreSQL mirror) chunks applied in one transaction.
A group's offsets are committed in one transaction after its sink commit (commit_group.py says why).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TypeVar, cast

import pyarrow as pa

from icetail.monitor.engine.commit_group import ChunkGroup, coalesced
from icetail.monitor.engine.delivery.context import DeliveryContext, Tally
from icetail.reader.split.read import Chunk
from icetail.sinks.base import ChunkKey, GroupCommitSink, StagingSink
from icetail.sinks.keyed.contract import GroupWriteSink
from icetail.state.checkpoint import InflightBatch

T = TypeVar("T")
log = logging.getLogger("icetail.pipeline")


class EachChunk:
    """Chunks to a sink that takes one at a time: each written (or, staged by its Spark task, made
    visible) under its key, then its offset committed."""

    def __init__(self, context: DeliveryContext, batch: InflightBatch, tally: Tally) -> None:
        self.context = context
        self.batch = batch
        self.tally = tally

    @classmethod
    def for_batch(cls, context: DeliveryContext, batch: InflightBatch, tally: Tally, *, staging: bool) -> EachChunk:
        """The writes of one batch; `staging`: the sink gave the batch a stager (its Spark tasks stage chunks)."""
        return cls(context, batch, tally)

    def add(self, key: ChunkKey, chunk: Chunk) -> None:
        """Deliver `chunk` under `key`, after what waits (in delivery order: what waits goes first)."""
        self.flush()
        token = None
        sink = self.context.sink
        if chunk.staged is not None:
            # the Spark task wrote the rows; the driver only makes them visible, in order
            self.context.before_write("chunk's staged commit")
            token = cast(StagingSink, sink).commit_staged(key, chunk.staged)
        elif chunk.batch is not None and chunk.batch.num_rows:
            self.context.before_write("chunk's sink write")
            token = sink.write(key, pa.Table.from_batches([chunk.batch]))
        self.tally.add_counts(chunk.change_counts)  # counted by read_split, staged or not
        self.context.before_write("chunk's offset commit")
        self.context.store.commit_chunk(
            self.context.consumer,
            self.batch.batch_id,
            chunk.split_id,
            chunk.next_row_exclusive,
            chunk.row_count,
            chunk.done,
            token,
            owner=self.context.owner,
        )
        self.context.committed()

    def flush(self) -> None:
        """Commit the chunks that wait, if any (none wait here)."""

    def flushing_on_failure(self, released: Iterator[T]) -> Iterator[T]:
        """`released`; when the read fails or a snapshot is refused (`--verify strict`), the chunks
        released before it are still committed, as they would have been without a group."""
        try:
            yield from released
        except Exception:
            try:
                self.flush()
            except Exception as exc:  # the group is read again on the next run; the read's error is the news
                log.warning("chunks of batch %s left uncommitted after a failed read: %s", self.batch.batch_id, exc)
            raise


class GroupedChunks(EachChunk):
    """Chunks held in a group (bounded by `--sink-commit-rows/--sink-commit-interval`) and committed
    together: staged ones in one sink commit, read ones in one sink write, then all their offsets in
    one transaction."""

    def __init__(self, context: DeliveryContext, batch: InflightBatch, tally: Tally) -> None:
        super().__init__(context, batch, tally)
        self.group = ChunkGroup(context.config.group_policy)

    def holds(self, chunk: Chunk) -> bool:
        """Whether `chunk` waits in the group (else it is delivered alone, after the group)."""
        raise NotImplementedError

    def add(self, key: ChunkKey, chunk: Chunk) -> None:
        if not self.holds(chunk):
            super().add(key, chunk)
            return
        self.group.add(key, chunk)
        if self.group.full():
            self.flush()

    def flush(self) -> None:
        """The waiting chunks made visible in one sink commit, then their offsets in one transaction."""
        if not len(self.group):
            return
        members = self.group.take()
        sink = self.context.sink
        staged = [(m.key, m.chunk.staged) for m in members if m.chunk.staged is not None]
        tokens: dict[ChunkKey, str | None] = {}
        if staged:
            self.context.before_write("group's staged commit")
            committed = cast(GroupCommitSink, sink).commit_staged_group(staged)
            tokens = {key: token for (key, _), token in zip(staged, committed, strict=True)}
        rows = [(m.key, m.chunk.batch) for m in members if m.chunk.staged is None and m.chunk.batch is not None]
        written = [(key, pa.Table.from_batches([batch])) for key, batch in rows if batch.num_rows]
        if written:
            self.context.before_write("group's sink write")
            applied = cast(GroupWriteSink, sink).write_group(written)
            tokens |= {key: token for (key, _), token in zip(written, applied, strict=True)}
        for member in members:
            self.tally.add_counts(member.chunk.change_counts)
        context = self.context
        commits = coalesced(members, tokens)
        context.before_write("group's offset commit")
        context.store.commit_chunks(context.consumer, self.batch.batch_id, commits, owner=context.owner)
        context.committed()


class StagedGroups(GroupedChunks):
    """A group-committing sink's (Iceberg: a commit is a snapshot) staged chunks, made visible together."""

    @classmethod
    def for_batch(cls, context: DeliveryContext, batch: InflightBatch, tally: Tally, *, staging: bool) -> EachChunk:
        # without a stager (the sink writes this batch from the driver) there is nothing staged to group
        return cls(context, batch, tally) if staging else EachChunk(context, batch, tally)

    def holds(self, chunk: Chunk) -> bool:
        return chunk.staged is not None or not chunk.row_count


class WrittenGroups(GroupedChunks):
    """A group-writing sink's (the PostgreSQL mirror: a commit is a transaction) chunks, read to the
    driver and applied together."""

    def holds(self, chunk: Chunk) -> bool:
        return True
