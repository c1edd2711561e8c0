"""The iceberg sink tests' catalog: a real pyiceberg SQL catalog on SQLite in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.sinks import CATALOG


@pytest.fixture
def sql_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """The catalog configured only through PYICEBERG_* variables, plus a direct handle to check it."""
    uri = f"sqlite:///{tmp_path}/catalog.db"
    warehouse = f"file://{tmp_path}/warehouse"
    monkeypatch.setenv(f"PYICEBERG_CATALOG__{CATALOG.upper()}__URI", uri)
    monkeypatch.setenv(f"PYICEBERG_CATALOG__{CATALOG.upper()}__WAREHOUSE", warehouse)
    return SqlCatalog(CATALOG, uri=uri, warehouse=warehouse)
