"""A PostgreSQL history table's validity columns, in PostgreSQL types; the version logic itself is
shared with the Iceberg history (keyed/history_versions.py)."""

from __future__ import annotations

from icetail.sinks.keyed.history_versions import VALID_FROM, VALID_FROM_SNAPSHOT_ID, VALID_TO, VALID_TO_SNAPSHOT_ID
from icetail.sinks.postgres.types import Column

TIMESTAMPTZ = "timestamp with time zone"
HISTORY_COLUMNS = (
    Column(VALID_FROM_SNAPSHOT_ID, "bigint", None),
    Column(VALID_TO_SNAPSHOT_ID, "bigint", None),
    Column(VALID_FROM, TIMESTAMPTZ, None),
    Column(VALID_TO, TIMESTAMPTZ, None),
)
