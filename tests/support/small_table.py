"""A small pyiceberg-written table (SQLite catalog in tmp_path) reachable by catalog name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@dataclass(frozen=True)
class SmallTable:
    name: str
    catalog: SqlCatalog
    snapshot_ids: tuple[int, ...]

    def load(self) -> Any:
        return self.catalog.load_table("ns.t")
