"""The `icetail` Spark data source: a table's change rows as a DataFrame, batch or stream (Spark >= 4.0).

    from icetail.spark import ChangesDataSource
    spark.dataSource.register(ChangesDataSource)
    spark.read.format("icetail").option("catalog", "cat").option("table", "db.t").load()

Spark 3.5 has no Python data source API: there, importing this module raises one line pointing
to `icetail changes` / `icetail run` and `icetail.read_changes`, which work on both lines.
"""

from __future__ import annotations

from icetail.monitor.engine.spark_version import require_spark4

require_spark4()

from icetail.monitor.engine.spark_source.source import ChangesDataSource  # noqa: E402

__all__ = ["ChangesDataSource"]
