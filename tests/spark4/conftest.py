"""Tables for the `icetail` Spark data source tests (Spark 4 only; marked `spark4`).

Tables are written by pyiceberg into a SQLite catalog in tmp_path. The data source reaches the
catalog through `catalog.*` options: Spark's driver-side Python workers were started with the
session and do not see environment variables a test sets later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.spark_version import pyspark_major
from tests.support.source_table import SourceTable, new_source_table


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.spark4)
            if pyspark_major() < 4:
                item.add_marker(pytest.mark.skip(reason="the icetail data source needs Spark >= 4.0"))








@pytest.fixture
def source_table(tmp_path: Path) -> SourceTable:
    return new_source_table(tmp_path / "src")


@pytest.fixture(scope="session")
def registered(spark: Any) -> Any:
    """The session's Spark with the data source registered."""
    from icetail.spark import ChangesDataSource

    spark.dataSource.register(ChangesDataSource)
    return spark
