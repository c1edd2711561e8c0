"""Hand each committed chunk to a Python function as a Spark DataFrame.

For callers whose next step is Spark (write to a JDBC table, MERGE into another lakehouse
table). The chunk's Arrow batches reach the JVM through `mapInArrow`, Arrow end to end; the
DataFrame is small (one chunk) and valid only during the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from icetail.kernel.extras import DATAFRAME, require
from icetail.sinks.base import ChunkKey
from icetail.sinks.python.callback import CallbackSink

DataFrameCallback = Callable[[ChunkKey, Any], Any]


def chunk_dataframe(spark: Any, rows: pa.Table) -> Any:
    """A Spark DataFrame holding `rows`, built through Arrow (no Python row objects)."""
    require(DATAFRAME, "the DataFrame sink")  # PySpark 3.5's mapInArrow imports pandas
    from pyspark.sql.pandas.types import from_arrow_schema

    batches = rows.to_batches()
    schema = from_arrow_schema(rows.schema)

    def emit(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    return spark.range(1).coalesce(1).mapInArrow(emit, schema)


class DataFrameCallbackSink(CallbackSink):
    """Calls `fn(key, dataframe)` once per chunk; delivery guarantees as for CallbackSink."""

    def __init__(self, fn: DataFrameCallback, spark: Any, *, idempotent: bool = False) -> None:
        require(DATAFRAME, "the DataFrame sink")  # when it is made, not at the first chunk

        def call(key: ChunkKey, rows: pa.Table) -> Any:
            return fn(key, chunk_dataframe(spark, rows))

        call.__qualname__ = getattr(fn, "__qualname__", "dataframe callback")
        super().__init__(call, idempotent=idempotent)
