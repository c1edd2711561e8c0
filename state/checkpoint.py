"""Frozen values a checkpoint store takes and returns.

They describe one consumer's durable progress: the committed cursor, the write-ahead record of
the batch in flight with per-split row offsets, the lease that keeps a second run out, and the
recent history. Times are epoch milliseconds read from the store's clock, so that two hosts
with skewed clocks agree on when a lease expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from icetail.kernel.model import ChangeSplit


@dataclass(frozen=True)
class Cursor:
    """The last fully delivered snapshot; `snapshot_id is None` means before the first snapshot.

    `timestamp_ms` is that snapshot's commit time, so lag can be reported without the catalog.
    """

    snapshot_id: int | None
    timestamp_ms: int | None

    def __post_init__(self) -> None:
        if (self.snapshot_id is None) != (self.timestamp_ms is None):
            raise ValueError(f"a cursor needs both a snapshot id and its timestamp, or neither: {self!r}")

    @classmethod
    def before_first_snapshot(cls) -> Cursor:
        return cls(None, None)


@dataclass(frozen=True)
class NewConsumer:
    """What a consumer is created with: the table it follows, where it starts, its sink and branch."""

    catalog: str
    table: str
    initial_cursor: Cursor
    sink: str | None = None
    branch: str = "main"


@dataclass(frozen=True)
class Lease:
    """Who may write a consumer's state, until when (store clock)."""

    owner: str
    expires_at_ms: int

    def is_live(self, now_ms: int) -> bool:
        return now_ms < self.expires_at_ms


@dataclass(frozen=True)
class BatchShape:
    """How a batch was planned, stored in typed columns beside it and kept in its history entry.

    `chunk_rows`: rows per chunk the batch started with (None: one row group per chunk); a
    resumed batch cuts exactly the same chunks whatever the restart is configured with.
    `first_ordinal`: the `_change_ordinal` of its first snapshot; `snapshot_count`: how many
    snapshots (commits) it holds, so the next batch's ordinals follow. `collapsed`: a repair
    batch whose one commit is the net change of a collapsed history (a direct diff). `net`: the
    batch delivers its net changes (`--net`) as one chunk; a resumed batch keeps this mode
    whatever the restart is configured with, so a batch is never half one and half the other.
    `schema_id`: the table schema its rows are projected onto; a batch never spans a schema
    change, so it is the schema every snapshot of the batch was written with. None for a batch
    written before store schema 6, which is projected onto its to-snapshot's schema, as then.
    `reconcile_partition_bytes`: a snapshot to reconcile whose splits hold more estimated bytes
    than this is reconciled in ceil(bytes / this) partitions by Spark tasks (reader/changes/shuffle.py),
    one chunk each; None (batches before store schema 7, Spark Connect): every snapshot whole,
    in the driver. Stored so a resumed batch cuts the same partitions.
    `net_partitioned`: a net batch whose fold is cut in partitions by the same size
    (reader/changes/net_shuffle.py) when its splits hold more; False (net batches before store schema 9):
    folded whole in the driver, as it began, so a batch is never delivered half one way.
    """

    chunk_rows: int | None = None
    first_ordinal: int = 0
    snapshot_count: int = 0
    collapsed: bool = False
    net: bool = False
    schema_id: int | None = None
    reconcile_partition_bytes: int | None = None
    net_partitioned: bool = False

    def __post_init__(self) -> None:
        if (self.chunk_rows is not None and self.chunk_rows < 1) or self.first_ordinal < 0 or self.snapshot_count < 0:
            raise ValueError(f"invalid batch shape: {self!r}")
        if self.reconcile_partition_bytes is not None and self.reconcile_partition_bytes < 1:
            raise ValueError(f"invalid batch shape: {self!r}")

    @property
    def next_ordinal(self) -> int:
        """The `_change_ordinal` of the snapshot after this batch's last one."""
        return self.first_ordinal + self.snapshot_count


@dataclass(frozen=True)
class InflightBatch:
    """The write-ahead record of one batch: snapshots (from, to] split into ordered splits.

    It is stored before any row is read, so that a restart resumes exactly these splits rather
    than replanning a range whose files may have been compacted or expired meanwhile.
    """

    batch_id: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    to_timestamp_ms: int
    splits: tuple[ChangeSplit, ...]
    shape: BatchShape = BatchShape()

    def __post_init__(self) -> None:
        if not self.batch_id:
            raise ValueError("batch_id must not be empty")
        if self.from_snapshot_exclusive == self.to_snapshot_inclusive:
            raise ValueError(f"batch {self.batch_id} is empty: from and to are both {self.to_snapshot_inclusive}")
        if not isinstance(self.splits, tuple):
            raise TypeError("InflightBatch.splits must be a tuple")
        ids = [s.split_id for s in self.splits]
        if len(set(ids)) != len(ids):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"batch {self.batch_id} repeats split ids {dupes[:5]}")

    @property
    def split_ids(self) -> tuple[str, ...]:
        return tuple(s.split_id for s in self.splits)


@dataclass(frozen=True)
class SplitProgress:
    """Committed progress of one split: rows at file positions < next_row_exclusive are delivered.

    `next_row_exclusive is None` means no chunk was committed yet (the split starts from its
    first row group). `sink_token` is the sink's own record of the last committed chunk.
    `parts_done`: on the first split of a snapshot reconciled in partitions, how many of its
    output partitions are delivered (those below it), and `parts_key` how the snapshot was cut
    (reader/changes/shuffle.py ShuffleSpec.fingerprint); None elsewhere.
    """

    split_id: str
    next_row_exclusive: int | None
    rows_emitted: int
    done: bool
    sink_token: str | None
    parts_done: int | None = None
    parts_key: str | None = None


@dataclass(frozen=True)
class ChunkCommit:
    """One split's new committed progress, as `commit_chunks` applies it."""

    split_id: str
    next_row_exclusive: int  # file-absolute: rows at positions < this are delivered
    rows_in_chunk: int  # added to the split's rows_emitted
    done: bool
    sink_token: str | None = None
    parts_done: int | None = None  # output partitions delivered (a partitioned snapshot's anchor); None: unchanged
    parts_key: str | None = None  # how that snapshot is cut into partitions; None: unchanged

    def __post_init__(self) -> None:
        if (
            self.next_row_exclusive < 0
            or self.rows_in_chunk < 0
            or (self.parts_done is not None and self.parts_done < 0)
        ):
            raise ValueError(f"negative chunk commit: {self!r}")


@dataclass(frozen=True)
class Inflight:
    """A batch in flight as loaded: the write-ahead record plus progress, in split order."""

    batch: InflightBatch
    created_at_ms: int
    progress: tuple[SplitProgress, ...]

    def progress_of(self, split_id: str) -> SplitProgress:
        """KeyError if the batch has no such split."""
        return self._by_split_id[split_id]

    @cached_property
    def _by_split_id(self) -> dict[str, SplitProgress]:
        return {p.split_id: p for p in self.progress}

    def pending(self) -> tuple[tuple[ChangeSplit, SplitProgress], ...]:
        """Splits not yet done, in planned order, with where each resumes."""
        return tuple((s, p) for s, p in zip(self.batch.splits, self.progress, strict=True) if not p.done)

    @property
    def rows_emitted(self) -> int:
        return sum(p.rows_emitted for p in self.progress)


@dataclass(frozen=True)
class Checkpoint:
    """Everything stored for one consumer, read in one consistent transaction."""

    consumer: str
    catalog: str
    table: str
    cursor: Cursor
    generation: int  # +1 on every finished batch and every reset: a cheap "did anything move"
    lease: Lease | None
    inflight: Inflight | None
    as_of_ms: int  # store clock when this was read; compare lease expiry against it
    sink: str | None = None  # normalized sink URL; None until a run records it (stores before schema 2)
    branch: str = "main"  # the branch whose history the consumer follows (schema 4; main before)

    def lease_is_live(self) -> bool:
        return self.lease is not None and self.lease.is_live(self.as_of_ms)


@dataclass(frozen=True)
class ConsumerSummary:
    """One line of `list_consumers`: a checkpoint without the in-flight splits."""

    consumer: str
    catalog: str
    table: str
    cursor: Cursor
    generation: int
    lease: Lease | None
    inflight_batch_id: str | None
    sink: str | None = None
    branch: str = "main"


@dataclass(frozen=True)
class StoppedConsumer:
    """A consumer `serve` stopped after repeated failures while its other tables kept delivering.

    `reason` is the last failure's one line; `stopped_at_ms` when it was first stopped (store
    clock), `updated_at_ms` when that reason was recorded (a retry that failed again).
    """

    consumer: str
    catalog: str
    table: str
    reason: str
    stopped_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True)
class HistoryEntry:
    """One finished batch: snapshots (from, to] delivered, `rows` rows in total."""

    batch_id: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    rows: int
    split_count: int
    started_at_ms: int
    finished_at_ms: int
    shape: BatchShape = BatchShape()
