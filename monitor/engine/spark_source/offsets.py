"""Stream offsets of the `icetail` data source: snapshot-based JSON values kept in Spark's checkpoint.

An offset names the last snapshot whose changes come *before* it (end-inclusive for the batch
that ends there, start-exclusive for the next one): micro-batch (start, end] holds exactly the
changes `icetail changes --from-snapshot start --to-snapshot end` reads. `next_ordinal` carries
the `_change_ordinal` count across batches, so the stream numbers snapshots from its start the
way `icetail run` does. Spark's checkpoint is the only state: offsets hold everything needed.

A rate limit (maxRowsPerTrigger, maxFilesPerTrigger, maxBytesPerTrigger) may end a batch inside
a snapshot: the offset then also carries a `position` in the next snapshot, `SnapshotPosition`
(spark_source/limits.py: `limited_end` chooses it, `cut_plan` reads up to and from it).

Offsets are a persisted format (Spark keeps them in the query's checkpoint), so each carries its
format version and every version ever written is read: 1, the three fields without a version
key; 2, the same fields and `"version": 2`; 3, with a `position` (written only by an offset that
has one, so a checkpoint at snapshot boundaries stays in format 2). A newer version is refused
with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.start_mode import StartMode
from icetail.monitor.engine.startup import initial_cursor
from icetail.monitor.planning.diff import REPLACE, operation_of
from icetail.monitor.planning.lineage import snapshots_between

OFFSET_FORMAT_VERSION = 2  # an offset at a snapshot boundary
POSITION_FORMAT_VERSION = 3  # an offset inside a snapshot (with a `position`)
SUPPORTED_OFFSET_FORMAT_VERSIONS = (1, 2, 3)  # 1: before offsets carried a version; same fields


@dataclass(frozen=True)
class SnapshotPosition:
    """A place inside snapshot `snapshot_id` (the child of the offset's snapshot on the stream's history).

    Everything of the snapshot before file row `row` of its split number `split` (in the plan's
    split order of that snapshot) lies before the offset; `row == 0`: that split is not started.
    `split_id` names that split, so a plan that changed since (another `filter`) is refused, not misread.
    """

    snapshot_id: int
    split: int
    row: int
    split_id: str

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "split": self.split, "row": self.row, "split_id": self.split_id}

    @classmethod
    def from_json(cls, raw: Any) -> SnapshotPosition:
        return cls(int(raw["snapshot_id"]), int(raw["split"]), int(raw["row"]), str(raw["split_id"]))


@dataclass(frozen=True)
class StreamOffset:
    """Changes of every snapshot up to `snapshot_id` (inclusive) lie before this offset.

    `snapshot_id is None`: before the table's first snapshot. `next_ordinal`: the
    `_change_ordinal` of the first non-replace snapshot after it. `position`: the part of the
    next snapshot that lies before the offset too (a rate limit cut that snapshot).
    """

    snapshot_id: int | None
    timestamp_ms: int | None
    next_ordinal: int = 0
    position: SnapshotPosition | None = None

    @property
    def plan_end(self) -> int | None:
        """The last snapshot a batch ending here reads (some of): the cut one, else `snapshot_id`."""
        return self.position.snapshot_id if self.position is not None else self.snapshot_id

    def to_json(self) -> dict[str, Any]:
        """Spark compares offsets by their JSON text: the key order is fixed here."""
        raw: dict[str, Any] = {
            "snapshot_id": self.snapshot_id,
            "timestamp_ms": self.timestamp_ms,
            "next_ordinal": self.next_ordinal,
            "version": OFFSET_FORMAT_VERSION,
        }
        if self.position is not None:
            raw["position"] = self.position.to_json()
            raw["version"] = POSITION_FORMAT_VERSION
        return raw

    @classmethod
    def from_json(cls, raw: Any) -> StreamOffset:
        """Every supported format version (the fields are the same in 1 and 2; 3 adds `position`)."""
        version = raw.get("version", 1) if isinstance(raw, dict) else None
        if isinstance(raw, dict) and version not in SUPPORTED_OFFSET_FORMAT_VERSIONS:
            supported = ", ".join(str(v) for v in SUPPORTED_OFFSET_FORMAT_VERSIONS)
            raise ConfigError(
                f"offset {raw!r} in the checkpoint has format version {version!r}, but this icetail reads offset "
                f"format versions {supported}; continue the query with the icetail release that wrote it"
            )
        try:
            snapshot_id, timestamp_ms, ordinal = raw["snapshot_id"], raw["timestamp_ms"], raw["next_ordinal"]
            if snapshot_id is not None:
                snapshot_id = int(snapshot_id)
            if timestamp_ms is not None:
                timestamp_ms = int(timestamp_ms)
            position = raw.get("position")
            at = SnapshotPosition.from_json(position) if position is not None and version == 3 else None
            if (position is None) != (at is None):
                raise ValueError("a position belongs to format 3")
            return cls(snapshot_id, timestamp_ms, int(ordinal), at)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"offset {raw!r} in the checkpoint is not an icetail offset; use a new checkpoint location"
            ) from None


def initial_offset(metadata: TableMetadata, starting: StartMode) -> StreamOffset:
    """Where a new query starts, as `icetail run --start` would (`snapshot:ID` counts ID as delivered)."""
    cursor = initial_cursor(metadata, starting)
    return StreamOffset(cursor.snapshot_id, cursor.timestamp_ms, 0)


def next_offset(
    metadata: TableMetadata,
    start: StreamOffset,
    *,
    max_snapshots: int | None = None,
    until_snapshot_id_inclusive: int | None = None,
) -> StreamOffset:
    """The end of the next micro-batch from `start`: the current snapshot, at most `max_snapshots` on.

    `until_snapshot_id_inclusive` caps the end (Trigger.AvailableNow's target). Returns `start`
    when there is nothing new. A `start` inside a snapshot counts that snapshot among the
    `max_snapshots`. A current snapshot that does not descend from `start` (a rollback)
    raises NotAncestorError: the checkpoint cannot be continued.
    """
    target = until_snapshot_id_inclusive if until_snapshot_id_inclusive is not None else metadata.current_snapshot_id
    if target is None or target == start.snapshot_id:
        return start
    chain = snapshots_between(metadata, start.snapshot_id, target)
    if max_snapshots is not None:
        chain = chain[:max_snapshots]
    if not chain:
        return start
    end = chain[-1]
    counted = sum(1 for snapshot in chain if operation_of(snapshot) != REPLACE)
    return StreamOffset(end.snapshot_id, end.timestamp_ms, start.next_ordinal + counted)


def at_snapshot_boundary(start: StreamOffset) -> StreamOffset:
    """`start` without its position: where the plan of a batch starting at `start` starts."""
    return StreamOffset(start.snapshot_id, start.timestamp_ms, start.next_ordinal)
