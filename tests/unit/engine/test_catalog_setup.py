"""The unknown-catalog error says what to set, and what it says is enough (issue 33).

pyiceberg takes a catalog's type from its URI's scheme, so a SQL (or REST, Hive) catalog needs
only `PYICEBERG_CATALOG__NAME__URI`; `__TYPE` is for a URI of another scheme, or for Glue.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.catalogs import open_catalog
from icetail.kernel.errors import CatalogNotFoundError
from tests.support.catalogs import new_catalog


@pytest.fixture(autouse=True)
def no_catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No catalog configured: none in the environment, no .pyiceberg.yaml where pyiceberg looks."""
    for key in os.environ:
        if key.startswith("PYICEBERG_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_an_unknown_catalog_asks_for_its_uri_and_the_uri_is_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CatalogNotFoundError) as refused:
        open_catalog("nope")
    message = str(refused.value)
    assert "set PYICEBERG_CATALOG__NOPE__URI (its scheme gives the type: sqlite:////abs/catalog.db" in message
    assert "__TYPE=glue" in message and "__URI and PYICEBERG_CATALOG__NOPE__TYPE" not in message

    made = new_catalog(tmp_path / "cat", "nope")
    made.catalog().create_namespace("ns")
    made.catalog().create_table("ns.t", schema=pa.schema([pa.field("id", pa.int64())]))
    monkeypatch.setenv("PYICEBERG_CATALOG__NOPE__URI", made.uri)  # as the message says: the URI alone
    assert open_catalog("nope").load_table("ns.t").metadata.current_snapshot_id is None


def test_a_uri_of_another_scheme_asks_for_the_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__ODD__URI", "jdbc:sqlite:/x.db")
    with pytest.raises(CatalogNotFoundError, match=r"set PYICEBERG_CATALOG__ODD__TYPE \(sql, rest, hive, glue"):
        open_catalog("odd")
