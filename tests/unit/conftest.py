"""A small pyiceberg-written table (SQLite catalog in tmp_path) reachable by catalog name."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tests.support.catalogs import new_catalog
from tests.support.small_table import SCHEMA, SmallTable


@pytest.fixture
def small_table(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> SmallTable:
    local = new_catalog(tmp_path, "core")
    for key, value in local.env().items():
        monkeypatch.setenv(key, value)
    catalog = local.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, SCHEMA))
    table.append(pa.table({"id": [4, 5], "v": ["d", "e"]}, SCHEMA))
    table.delete("id = 2")
    table = catalog.load_table("ns.t")
    ids = tuple(s.snapshot_id for s in table.metadata.snapshots)
    return SmallTable("core", catalog, ids)
