"""A test seam: the icetail data source that commits one more snapshot while its stream runs.

Option `commit-marker` (taken out before the data source sees its options) names a file: the
first batch planned (`partitions()`, driver side) appends four rows to the table and creates it,
so a Trigger.AvailableNow query sees a commit made after its start.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.spark_source.options import StreamOptions, parse_stream_options
from icetail.monitor.engine.spark_source.source import ChangesDataSource, ChangesStreamReader

MARKER_OPTION = "commit-marker"


class CommittingStreamReader(ChangesStreamReader):
    def __init__(self, options: StreamOptions, schema_id: int | None, schema: StructType, marker: str) -> None:
        super().__init__(options, schema_id, schema)
        self._marker = Path(marker)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if not self._marker.exists():
            source = self._options.source
            table = load_table(open_catalog(source.catalog, dict(source.catalog_properties)), source.table)
            rows = [{"id": 9000 + i, "v": "late", "n": 0.0} for i in range(4)]
            table.append(pa.Table.from_pylist(rows, table.schema().as_arrow()))
            self._marker.write_text("committed")
        return super().partitions(start, end)


class CommittingChangesDataSource(ChangesDataSource):
    def __init__(self, options: MutableMapping[str, str]) -> None:
        self._marker = str(options.pop(MARKER_OPTION))
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return "icetail_committing"

    def streamReader(self, schema: StructType) -> Any:
        _, schema_id = self._pinned_values()
        return CommittingStreamReader(parse_stream_options(self.options), schema_id, schema, self._marker)
