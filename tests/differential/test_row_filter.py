"""`row_filter` against Java: the changes of a filtered range are the changes of the filtered rows.

For every snapshot S of a Java-written workload (updates, MERGE, copy-on-write and merge-on-read
deletes, equality deletes, compaction, schema and partition evolution), the DELETE side equals
Java's rows at S's parent that the filter selects minus those at S, the INSERT side the reverse,
and replaying the range onto the filtered rows at its start gives the filtered rows at its end.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.engines import changes_by_engine, engine_problems
from tests.support.oracle import check_changes
from tests.support.workloads import COW, MIXED, MOR, Workload

# `p` is the partition column of the partitioned workloads (values 0..2), `id` is in 0..34
ROW_FILTER = "p = 1 or (id >= 5 and id < 12)"


def selected(row: dict[str, Any]) -> bool:
    """ROW_FILTER in Python, with SQL's NULL: a NULL comparison selects nothing."""
    p, row_id = row.get("p"), row.get("id")
    return p == 1 or (row_id is not None and 5 <= row_id < 12)


@pytest.mark.parametrize(
    ("format_version", "partitioned", "mode", "seed"),
    [
        pytest.param(2, True, MOR, 11, id="v2-partitioned-mor"),
        pytest.param(2, True, COW, 12, id="v2-partitioned-cow"),
        pytest.param(3, False, MIXED, 13, id="v3-unpartitioned-mixed"),
    ],
)
def test_filtered_changes_match_java(
    catalog: Any, format_version: int, partitioned: bool, mode: str, seed: int
) -> None:
    from icetail.monitor.engine.api import plan_range, read_changes

    workload = Workload(
        catalog, "t", seed=seed, steps=8, format_version=format_version, partitioned=partitioned, mode=mode
    )
    workload.run()
    table = catalog.load_table("t")
    ids = catalog.snapshot_ids("t")
    problems: list[str] = []
    for from_id, to_id in [(None, None), (ids[2], ids[-1]), (ids[4], ids[5])]:
        for engine, out in changes_by_engine(read_changes, table, from_id, to_id, row_filter=ROW_FILTER).items():
            problems += engine_problems(engine, check_changes(out, catalog, "t", from_id, to_id, keep=selected))
    assert not problems, "\n".join(problems) + "\n" + workload.describe()
    if partitioned:  # whole partitions (p = 0, 2) outside the id range are never read
        assert plan_range(table, row_filter=ROW_FILTER).files_pruned > 0
