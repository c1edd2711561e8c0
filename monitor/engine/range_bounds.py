"""A range as the user gave it, before any metadata is read: light, so the command line checks it at once."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from icetail.kernel.settings import MAIN_BRANCH

Instant = datetime.datetime | int  # an aware datetime (naive: UTC) or epoch milliseconds


@dataclass(frozen=True)
class RangeBounds:
    """A range as the user gave it: at most one bound per end, on the history of `branch`.

    `from_timestamp_exclusive` starts after the newest snapshot committed at or before it (as
    Iceberg's changelog view reads `start-timestamp`); `from_timestamp_inclusive` starts with the
    first snapshot committed at or after it (as Delta's `startingTimestamp`).
    """

    from_snapshot_id_exclusive: int | None = None
    to_snapshot_id_inclusive: int | None = None
    from_timestamp_exclusive: Instant | None = None
    from_timestamp_inclusive: Instant | None = None
    to_timestamp_inclusive: Instant | None = None
    from_tag: str | None = None
    to_tag: str | None = None
    branch: str = MAIN_BRANCH
