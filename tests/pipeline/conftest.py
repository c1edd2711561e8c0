"""Pipeline tests: real catalogs, real `icetail` processes, real state stores, real Spark.

The helpers live in tests/support (catalogs, processes, tables, sinks, compare, stores, crash),
shared with bench/crash_soak.py; here are only the fixtures. pyiceberg reads
`PYICEBERG_CATALOG__*` once, when `pyiceberg.catalog` is imported; child processes get the
variables in their environment, in-process code uses `use_catalogs`, which sets them and
re-reads pyiceberg's configuration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.catalogs import catalogs_in_process
from tests.support.stores import drop_state, new_state_url, pg_unavailable


@pytest.fixture
def use_catalogs() -> Iterator[Callable[..., None]]:
    """`use_catalogs(cat, ...)`: `catalogs_in_process` until the end of the test."""
    with contextlib.ExitStack() as stack:
        yield lambda *catalogs: stack.enter_context(catalogs_in_process(*catalogs))


@pytest.fixture
def state_url_factory(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Fresh stores by kind ('sqlite' | 'postgresql'); PostgreSQL schemas are dropped afterwards."""
    made: list[str] = []
    reason = None

    def make(kind: str) -> str:
        nonlocal reason
        if kind == "postgresql":
            reason = reason or pg_unavailable()
            if reason:
                pytest.skip(reason)
        url = new_state_url(kind, tmp_path / f"state{len(made)}")
        (tmp_path / f"state{len(made)}").mkdir(exist_ok=True)
        made.append(url)
        return url

    yield make
    for url in made:
        drop_state(url)
from tests.support.pg_mirror import pg_schema  # noqa: F401, E402  (a fixture)
