"""A table whose snapshot summary lies: the writer filled a count wrong.

Neither Java Iceberg nor pyiceberg lets a commit set its own counts (they are reserved and
computed from the files), so a lying summary is made by rewriting the table's current metadata
file in place, as a broken writer or a hand-edited copy would leave it. Both pyiceberg's and
Java's catalogs read the metadata file afresh on every load.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse


def metadata_path(table: Any) -> str:
    """The local path of a pyiceberg table's current metadata file."""
    location = str(table.metadata_location)
    return urlparse(location).path if location.startswith("file:") else location


def doctor_summary(table: Any, snapshot_id: int, **values: str | None) -> dict[str, str]:
    """Set summary keys (`added_records="3"` sets `added-records`, None removes it) of one snapshot.

    Returns the new summary.
    """
    path = metadata_path(table)
    with open(path, encoding="utf-8") as stream:
        metadata = json.load(stream)
    (snapshot,) = [s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id]
    summary: dict[str, str] = snapshot["summary"]
    for key, value in values.items():
        if value is None:
            summary.pop(key.replace("_", "-"), None)
        else:
            summary[key.replace("_", "-")] = value
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(metadata, stream)
    return dict(summary)
