"""The icetail source speaking Spark 4.0/4.1's streaming protocol: `latestOffset()` with no start.

Spark 4.3 falls back to that protocol for a reader whose `latestOffset` takes no parameters, so
the reader's own fallback (it tracks the offsets it planned and committed) runs under test here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from icetail.monitor.engine.spark_source.options import parse_stream_options
from icetail.monitor.engine.spark_source.source import ChangesDataSource, ChangesStreamReader


class LegacyStreamReader(DataSourceStreamReader):
    """The reader's methods as Spark 4.0 sees them: no admission control, no AvailableNow mixin."""

    def __init__(self, inner: ChangesStreamReader) -> None:
        self.inner = inner

    def initialOffset(self) -> dict[str, Any]:
        return self.inner.initialOffset()

    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]
        return self.inner.latestOffset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return self.inner.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.inner.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.inner.commit(end)


class LegacyChangesDataSource(ChangesDataSource):
    @classmethod
    def name(cls) -> str:
        return "icetail_legacy"

    def streamReader(self, schema: StructType) -> Any:
        _, schema_id = self._pinned_values()
        return LegacyStreamReader(ChangesStreamReader(parse_stream_options(self.options), schema_id, schema))
