"""Shared fixtures: one SparkSession with the Java Iceberg reference, one fresh catalog per test.

* `spark` (session): local[2] SparkSession with iceberg-spark-runtime 1.10.2, the relocated Jackson
  (tests/support/shade_jackson.py), sqlite-jdbc and Iceberg's SQL extensions. No catalog is
  configured on it; `SparkSession.builder.getOrCreate()` elsewhere returns this session.
* `catalog` (function): a `tests.support.javaref.JavaCatalog` - a JDBC/SQLite Iceberg catalog
  registered in Spark under a unique name plus pyiceberg's `SqlCatalog` on the same file, in
  tmp_path, with namespace `ns` created. See `catalog.env()` for the PYICEBERG_* variables.

Tests that use either fixture get the `java` marker automatically.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.javaref import JavaCatalog, build_spark_session, new_catalog

_JAVA_FIXTURES = {"spark", "catalog"}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_spark_session()
    yield session
    session.stop()


@pytest.fixture
def catalog(spark: Any, tmp_path: Any) -> JavaCatalog:
    return new_catalog(spark, tmp_path / "iceberg")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _JAVA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.java)
