"""The DataFrame callback sink hands each chunk to Spark through Arrow."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icetail.sinks.base import ChunkKey
from icetail.sinks.python.dataframe import DataFrameCallbackSink


def test_chunk_arrives_as_a_dataframe(spark: Any) -> None:
    seen: list[tuple[str, list[tuple[Any, ...]]]] = []

    def deliver(key: ChunkKey, frame: Any) -> str:
        seen.append((key.name, sorted(tuple(r) for r in frame.collect())))
        return "ok"

    sink = DataFrameCallbackSink(deliver, spark, idempotent=True)
    rows = pa.table({"id": pa.array([2, 1], pa.int64()), "v": ["b", None], "_change_type": ["INSERT", "DELETE"]})
    assert sink.write(ChunkKey("c", "b1", 0, "s", 0), rows) == "ok"
    assert sink.exactly_once
    assert seen == [("c-b1-000000-000000000000", [(1, None, "DELETE"), (2, "b", "INSERT")])]
