"""Helpers comparing the data source's DataFrames with icetail's Python API."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from icetail.reader.split.metadata_columns import METADATA_COLUMNS


def comparable(table: pa.Table) -> pa.Table:
    """Timestamps with a zone as UTC (Spark hands them over in the session's zone)."""
    columns = []
    for column in table.columns:
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = column.cast(pa.timestamp("us", tz="UTC"))
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def row_counter(table: pa.Table, columns: list[str] | None = None) -> Counter[tuple[Any, ...]]:
    table = comparable(table.select(columns) if columns is not None else table)
    return Counter(tuple(row.values()) for row in table.to_pylist())


def load_df(spark: Any, options: dict[str, str]) -> pa.Table:
    return spark.read.format("icetail").options(**options).load().toArrow()


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in METADATA_COLUMNS]
