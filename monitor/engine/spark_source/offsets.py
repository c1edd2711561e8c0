"""Stream offsets of the `icetail` data source: snapshot-based JSON values kept in Spark's checkpoint.

An offset names the last snapshot whose changes come *before* it (end-inclusive for the batch
that ends there, start-exclusive for the next one): micro-batch (start, end] holds exactly the
changes `icetail changes --from-snapshot start --to-snapshot end` reads. `next_ordinal` carries
the `_change_ordinal` count across batches, so the stream numbers snapshots from its start the
way `icetail run` does. Spark's checkpoint is the only state: offsets hold everything needed.

Offsets are a persisted format (Spark keeps them in the query's checkpoint), so each carries its
format version and every version ever written is read: 1, the three fields without a version
key; 2, the same fields and `"version": 2`. A newer version is refused with one line.
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

OFFSET_FORMAT_VERSION = 2
SUPPORTED_OFFSET_FORMAT_VERSIONS = (1, 2)  # 1: before offsets carried a version; same fields


@dataclass(frozen=True)
class StreamOffset:
    """Changes of every snapshot up to `snapshot_id` (inclusive) lie before this offset.

    `snapshot_id is None`: before the table's first snapshot. `next_ordinal`: the
    `_change_ordinal` of the first non-replace snapshot after it.
    """

    snapshot_id: int | None
    timestamp_ms: int | None
    next_ordinal: int = 0

    def to_json(self) -> dict[str, Any]:
        """Spark compares offsets by their JSON text: the key order is fixed here."""
        return {
            "snapshot_id": self.snapshot_id,
            "timestamp_ms": self.timestamp_ms,
            "next_ordinal": self.next_ordinal,
            "version": OFFSET_FORMAT_VERSION,
        }

    @classmethod
    def from_json(cls, raw: Any) -> StreamOffset:
        """Every supported format version (the fields are the same in 1 and 2)."""
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
            return cls(snapshot_id, timestamp_ms, int(ordinal))
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
    when there is nothing new. A current snapshot that does not descend from `start` (a rollback)
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
