"""Fixtures of the process-level service tests; the helpers are in tests/support/serve.py.

`warehouse`: a real SQLite pyiceberg catalog in tmp_path that the children open by name.
`children`: every child registered here has its whole process group killed at teardown.
`pg_state` (a PostgreSQL store in a fresh schema) is tests/conftest.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.serve import Child, Warehouse


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "iceberg")


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Register every Child here; all their process groups are killed at teardown."""
    started: list[Child] = []
    yield started
    for child in started:
        child.kill_group()
