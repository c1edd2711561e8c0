"""A PostgreSQL history table's validity columns; the version logic itself is shared with the
Iceberg mirror (../history_versions.py) and re-exported here."""

from __future__ import annotations

from icetail.sinks.keyed.history_versions import (
    CLOSE,
    CLOSE_FRESH,
    VALID_FROM,
    VALID_FROM_SNAPSHOT_ID,
    VALID_TO,
    VALID_TO_SNAPSHOT_ID,
    VERSION,
    VersionChanges,
    history_key,
    version_changes,
)
from icetail.sinks.postgres.types import Column

TIMESTAMPTZ = "timestamp with time zone"
HISTORY_COLUMNS = (
    Column(VALID_FROM_SNAPSHOT_ID, "bigint", None),
    Column(VALID_TO_SNAPSHOT_ID, "bigint", None),
    Column(VALID_FROM, TIMESTAMPTZ, None),
    Column(VALID_TO, TIMESTAMPTZ, None),
)

__all__ = [
    "CLOSE",
    "CLOSE_FRESH",
    "HISTORY_COLUMNS",
    "VALID_FROM",
    "VALID_FROM_SNAPSHOT_ID",
    "VALID_TO",
    "VALID_TO_SNAPSHOT_ID",
    "VERSION",
    "VersionChanges",
    "history_key",
    "version_changes",
]
