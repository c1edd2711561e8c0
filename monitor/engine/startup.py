"""Where a new consumer starts (Kafka's startup modes) and what to do when its cursor is gone."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata

from icetail.monitor.planning.lineage import is_ancestor, snapshot_as_of, snapshot_by_id, snapshot_or_raise
from icetail.state.checkpoint import Cursor
from icetail.state.errors import ConfigError

START_MODES = ("earliest", "latest", "full", "snapshot:ID", "timestamp:ISO8601")
MISSING_CURSOR_POLICIES = ("fail", "earliest", "latest", "full")


@dataclass(frozen=True)
class StartMode:
    kind: str  # earliest | latest | full | snapshot | timestamp
    snapshot_id: int | None = None
    timestamp_ms: int | None = None

    @property
    def reads_full_snapshot(self) -> bool:
        """`full`: the first batch is the current snapshot's rows as INSERTs."""
        return self.kind == "full"


ISO_EXAMPLE = "2026-01-31T12:00:00Z"


def parse_start(text: str, flag: str = "--start") -> StartMode:
    """Parse `--start` (or `reset --to`, named by `flag`); ConfigError naming the accepted forms."""
    if text in ("earliest", "latest", "full"):
        return StartMode(text)
    if text.startswith("snapshot:"):
        try:
            return StartMode("snapshot", snapshot_id=int(text.split(":", 1)[1]))
        except ValueError:
            raise ConfigError(f"{flag} {text!r}: the snapshot id must be an integer, e.g. snapshot:1234") from None
    if text.startswith("timestamp:"):
        raw = text.split(":", 1)[1]
        try:
            when = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"{flag} {text!r}: {raw!r} is not an ISO 8601 time; write e.g. timestamp:{ISO_EXAMPLE} "
                "(UTC when no offset is given)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return StartMode("timestamp", timestamp_ms=int(when.timestamp() * 1000))
    raise ConfigError(f"{flag} {text!r} is not one of: {', '.join(START_MODES)} (e.g. timestamp:{ISO_EXAMPLE})")


def initial_cursor(metadata: TableMetadata, mode: StartMode) -> Cursor:
    """The cursor (last snapshot considered delivered) a new consumer starts from."""
    if mode.kind in ("earliest", "full"):
        return Cursor.before_first_snapshot()
    if mode.kind == "latest":
        current = metadata.current_snapshot()
        return Cursor(current.snapshot_id, current.timestamp_ms) if current else Cursor.before_first_snapshot()
    if mode.kind == "snapshot":
        assert mode.snapshot_id is not None
        start = snapshot_or_raise(metadata, mode.snapshot_id, "--start")
        return Cursor(start.snapshot_id, start.timestamp_ms)
    assert mode.timestamp_ms is not None
    found = snapshot_as_of(metadata, mode.timestamp_ms)
    return Cursor(found.snapshot_id, found.timestamp_ms) if found else Cursor.before_first_snapshot()


def cursor_problem(metadata: TableMetadata, cursor: Cursor) -> str | None:
    """Why the committed cursor cannot be continued from, or None if it can."""
    if cursor.snapshot_id is None:
        return None
    if snapshot_by_id(metadata, cursor.snapshot_id) is None:
        return f"cursor snapshot {cursor.snapshot_id} no longer exists (expired)"
    current = metadata.current_snapshot_id
    if current is not None and not is_ancestor(metadata, cursor.snapshot_id, current):
        return f"current snapshot {current} does not descend from cursor snapshot {cursor.snapshot_id} (rollback)"
    return None


def parse_missing_cursor_policy(text: str) -> str:
    if text not in MISSING_CURSOR_POLICIES:
        raise ConfigError(f"--on-missing-cursor {text!r} is not one of: {', '.join(MISSING_CURSOR_POLICIES)}")
    return text
