"""Change streams compared as multisets of full rows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

META_COLUMNS = ("_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp")


def row_multiset(rows: pa.Table | None, schema: pa.Schema, *, partial: bool = False) -> Counter[tuple[Any, ...]]:
    """Full rows (every column of `schema`, cast to its type) counted; extra sink columns dropped.

    `partial`: the sink may lack columns added to the table after what it holds so far (rows
    of a batch have that batch's schema); they count as nulls.
    """
    if rows is None or rows.num_rows == 0:
        return Counter()
    missing = [f.name for f in schema if f.name not in rows.column_names]
    assert partial or not missing, f"sink rows lack columns {missing}; sink columns: {rows.column_names}"
    columns = [
        rows.column(f.name).cast(f.type).to_pylist() if f.name in rows.column_names else [None] * rows.num_rows
        for f in schema
    ]
    return Counter(zip(*columns, strict=True))


def diff_report(expected: Counter[tuple[Any, ...]], actual: Counter[tuple[Any, ...]], limit: int = 5) -> str:
    """Rows lost and rows duplicated or foreign, with examples; '' when the multisets are equal."""
    lost = expected - actual
    extra = actual - expected
    if not lost and not extra:
        return ""
    lines = [
        f"expected {sum(expected.values())} rows, sink holds {sum(actual.values())}: "
        f"{sum(lost.values())} lost, {sum(extra.values())} duplicated or foreign"
    ]
    for label, bag in (("lost", lost), ("extra", extra)):
        for row, n in list(bag.items())[:limit]:
            lines.append(f"  {label} x{n}: {row}")
    return "\n".join(lines)


def is_submultiset(small: Counter[tuple[Any, ...]], big: Counter[tuple[Any, ...]]) -> bool:
    return not (small - big)
