"""Snapshot expiry the ways users run it, through the Java reference (tests/support/javaref.py)."""

from __future__ import annotations

import datetime
from typing import Any


def expire(catalog: Any, ident: str, how: str) -> None:
    """Expire everything but the current snapshot (and what refs keep), the ways users do."""
    newest = max(s.timestamp_ms for s in catalog.load_table(ident).metadata.snapshots)
    cutoff = newest + 1
    if how == "api-keep-files":
        catalog.java_table(ident).expireSnapshots().expireOlderThan(cutoff).retainLast(1).cleanExpiredFiles(
            False
        ).commit()
        return
    when = datetime.datetime.fromtimestamp(cutoff / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    retain = ", retain_last => 1" if how == "procedure-retain-last" else ""
    catalog.sql(
        f"CALL {{cat}}.system.expire_snapshots(table => '{ident}', "
        f"older_than => TIMESTAMP '{when} UTC'{retain})"
    )
