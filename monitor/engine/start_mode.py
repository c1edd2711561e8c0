"""Where a new consumer starts (`--start`, `reset --to`): parsed from the text alone, before any table is read."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import ISO_EXAMPLE

START_MODES = ("earliest", "latest", "full", "snapshot:ID", "timestamp:ISO8601", "tag:NAME")


@dataclass(frozen=True)
class StartMode:
    kind: str  # earliest | latest | full | snapshot | timestamp | tag
    snapshot_id: int | None = None
    timestamp_ms: int | None = None
    tag: str | None = None  # kind "tag": the tagged snapshot counts as delivered, like snapshot:ID

    @property
    def reads_full_snapshot(self) -> bool:
        """`full`: the first batch is the current snapshot's rows as INSERTs."""
        return self.kind == "full"


def parse_start(text: str, flag: str = "--start") -> StartMode:
    """Parse `--start` (or `reset --to`, named by `flag`); ConfigError naming the accepted forms."""
    if text in ("earliest", "latest", "full"):
        return StartMode(text)
    if text.startswith("snapshot:"):
        try:
            return StartMode("snapshot", snapshot_id=int(text.split(":", 1)[1]))
        except ValueError:
            raise ConfigError(f"{flag} {text!r}: the snapshot id must be an integer, e.g. snapshot:1234") from None
    if text.startswith("tag:"):
        name = text.split(":", 1)[1].strip()
        if not name:
            raise ConfigError(f"{flag} {text!r}: name the tag, e.g. tag:audited")
        return StartMode("tag", tag=name)
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
