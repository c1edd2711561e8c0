"""Both engines on one read: Spark tasks and the in-process engine (reader/local.py).

A differential test reads each range with every engine, checks each result against its oracle,
and asks the engines to agree row for row, in order: the in-process engine runs the same split
reader, delete application and reconciliation as the Spark tasks, so any difference is a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

ENGINES = ("spark", "local")


def changes_by_engine(read: Callable[..., pa.Table], *args: Any, **kwargs: Any) -> dict[str, pa.Table]:
    """`read(*args, engine=e, **kwargs)` for each engine; an AssertionError if the tables differ."""
    outputs = {engine: read(*args, engine=engine, **kwargs) for engine in ENGINES}
    spark, local = outputs["spark"], outputs["local"]
    assert local.schema.equals(spark.schema, check_metadata=True), f"schemas differ:\n{local.schema}\n{spark.schema}"
    assert same_rows(local, spark), _difference(local, spark)
    return outputs


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Row for row, in order, by each value's repr: a NaN equals a NaN here (Arrow's `equals` says not)."""
    return [repr(r) for r in a.to_pylist()] == [repr(r) for r in b.to_pylist()]


def _difference(local: pa.Table, spark: pa.Table) -> str:
    """Where the engines' rows part: the first differing row, and whether only their order differs."""
    a, b = [repr(r) for r in local.to_pylist()], [repr(r) for r in spark.to_pylist()]
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    same = sorted(a) == sorted(b)
    where = f"row {first}: local {a[first] if first < len(a) else None}, spark {b[first] if first < len(b) else None}"
    how = "only in order" if same else "in rows"
    return f"local and spark rows differ ({len(a)} and {len(b)} rows; {how}) at {where}"


def engine_problems(engine: str, problems: list[str]) -> list[str]:
    """An oracle's problems with one engine's output, each naming the engine."""
    return [f"[engine {engine}] {problem}" for problem in problems]
