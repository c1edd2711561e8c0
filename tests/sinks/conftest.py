"""The iceberg sink tests' catalog: a real pyiceberg SQL catalog on SQLite in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.sinks import CATALOG
from tests.support.catalogs import new_catalog
from tests.support.pg_mirror import pg_schema  # noqa: F401  (a fixture)


@pytest.fixture
def sql_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """The catalog configured only through PYICEBERG_* variables, plus a direct handle to check it."""
    local = new_catalog(tmp_path, CATALOG)
    for key, value in local.env().items():
        monkeypatch.setenv(key, value)
    return local.catalog()
