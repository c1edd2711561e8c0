"""The checkpoint store's contract: what every store keeps, whatever database holds it.

Exactly-once delivery rests on four rules, each kept inside one database transaction:

1. Write-ahead: a batch (its snapshot range and its ordered splits) is stored by `begin_batch`
   before any row is read, and only if the cursor is where the caller planned from (CAS).
2. Chunk commits are monotonic: a split's `next_row_exclusive` never moves backwards, a done
   split never changes, and an identical replay of the last commit is accepted as a no-op, so
   a commit whose outcome was lost (connection dropped during COMMIT) can simply be retried.
3. `finish_batch` advances the cursor to the batch's to-snapshot only when every split is done,
   clears the batch and appends to the history, all at once.
4. Writers are fenced by the lease: a write that names an `owner` is refused unless that owner
   holds the consumer's lease, live on the database clock; a write without an owner is refused
   while anyone's lease is live.

The store's methods and their signatures are declared here once: the SQL store (state/store.py)
inherits this class, and the two conveniences (`ensure_consumer`, `commit_chunk`) are written here
in terms of the methods a store implements.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from icetail.kernel.settings import HISTORY_LIMIT
from icetail.state.checkpoint import (
    Checkpoint,
    ChunkCommit,
    ConsumerSummary,
    Cursor,
    HistoryEntry,
    InflightBatch,
    Lease,
    NewConsumer,
    StoppedConsumer,
)


class CheckpointStore(Protocol):
    """Durable progress of many consumers (one per pipeline), each keyed by a consumer id."""

    def load(self, consumer: str) -> Checkpoint | None:
        """The consumer's whole state read consistently, or None if it was never created."""
        ...

    def ensure_consumer(
        self,
        consumer: str,
        catalog: str,
        table: str,
        initial_cursor: Cursor,
        sink: str | None = None,
        branch: str = "main",
    ) -> Checkpoint:
        """Create the consumer at `initial_cursor` (with `sink`, following `branch`) if missing; an
        existing one keeps its own.

        ConfigError if the consumer exists but follows another catalog or table.
        """
        return self.create_or_load(consumer, NewConsumer(catalog, table, initial_cursor, sink, branch))

    def create_or_load(self, consumer: str, new: NewConsumer) -> Checkpoint:
        """`ensure_consumer` of a value: the consumer's checkpoint, created as `new` says if missing."""
        ...

    def record_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> str:
        """Record `sink` as the consumer's sink if none is recorded yet; the sink recorded now.

        The caller compares the result with its own sink: a consumer delivers to one sink.
        """
        ...

    def forget_unstarted(self, consumer: str, *, owner: str) -> bool:
        """Remove a consumer that never began a batch (generation 0, none in flight, no history),
        held by `owner`: the first run that created it failed, and leaves no trace. False if it had begun."""
        ...

    def change_sink(self, consumer: str, sink: str, *, owner: str | None = None) -> None:
        """Record a different sink (an operator action); refused while a batch is in flight."""
        ...

    def change_branch(self, consumer: str, branch: str, *, owner: str | None = None) -> None:
        """Follow another branch from now on (an operator action); refused while a batch is in flight."""
        ...

    def acquire_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        """Take (or extend) the lease; StateBusyError while another owner's lease is live."""
        ...

    def renew_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        """Extend a lease `owner` holds; StateBusyError if it was taken over meanwhile."""
        ...

    def release_lease(self, consumer: str, owner: str) -> None:
        """Give the lease up; a no-op if `owner` does not hold it."""
        ...

    def begin_batch(self, consumer: str, batch: InflightBatch, *, owner: str | None = None) -> None:
        """Write the batch ahead; CAS: the cursor must equal `batch.from_snapshot_exclusive`.

        StateConflictError if the cursor moved or another batch is in flight; beginning the
        same batch again (same id, range and split ids) is a no-op.
        """
        ...

    def commit_chunk(
        self,
        consumer: str,
        batch_id: str,
        split_id: str,
        next_row_exclusive: int,
        rows_in_chunk: int,
        done: bool,
        sink_token: str | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Record that rows at positions < next_row_exclusive of the split are delivered.

        Adds `rows_in_chunk` to the split's emitted rows and stores `sink_token`. Refuses
        (StateConflictError) a batch that is not in flight, an unknown split, an offset that
        moves backwards or stays put without finishing the split, and any change to a done
        split; an exact replay of the stored state is a no-op.
        """
        commit = ChunkCommit(split_id, next_row_exclusive, rows_in_chunk, done, sink_token)
        self.commit_chunks(consumer, batch_id, (commit,), owner=owner)

    def commit_chunks(
        self, consumer: str, batch_id: str, commits: Sequence[ChunkCommit], *, owner: str | None = None
    ) -> None:
        """`commit_chunk` for several splits in one transaction: all are applied or none.

        For a chunk the sink wrote as one unit but that spans splits (e.g. a reconciled snapshot).
        """
        ...

    def finish_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> HistoryEntry:
        """Advance the cursor to the batch's to-snapshot, clear it and record it in the history.

        StateConflictError unless that batch is in flight with every split done; finishing a
        batch that is already the newest history entry returns that entry (replay).
        """
        ...

    def abandon_batch(self, consumer: str, batch_id: str, *, owner: str | None = None) -> None:
        """Forget an in-flight batch and its progress, leaving the cursor where it is."""
        ...

    def reset_cursor(self, consumer: str, cursor: Cursor, *, owner: str | None = None) -> None:
        """Move the cursor (an operator action); refused while a batch is in flight."""
        ...

    def history(self, consumer: str, limit: int = HISTORY_LIMIT) -> tuple[HistoryEntry, ...]:
        """Finished batches, newest first."""
        ...

    def list_consumers(self) -> tuple[ConsumerSummary, ...]:
        """Every consumer in the store, by id."""
        ...

    def record_stopped(self, consumer: str, catalog: str, table: str, reason: str) -> StoppedConsumer:
        """Record that `serve` stopped the consumer, and why (the first line of `reason`).

        A consumer stopped already keeps when it stopped and takes the new reason. Not fenced by
        the lease: a stopped consumer holds none, and the consumer may never have been created.
        """
        ...

    def clear_stopped(self, consumer: str) -> bool:
        """Forget the consumer's stop (it delivers again); whether one was recorded."""
        ...

    def stopped_consumers(self) -> tuple[StoppedConsumer, ...]:
        """Every consumer recorded as stopped, by id."""
        ...

    def close(self) -> None:
        """Release the connection; idempotent."""
        ...

    def __enter__(self) -> CheckpointStore: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
