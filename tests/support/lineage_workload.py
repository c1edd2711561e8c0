"""The v3 row-lineage workload and its expected changes from Java's `_row_id` reads.

Shared by tests/differential/test_row_lineage.py (Java reads live, Spark 3.5) and the Spark 4
data source test (Java reads saved by `python -m tests.support.lineage_export` on the 3.5 venv).
A snapshot's expected changes come from Java's rows at its parent and at itself, matched by
`_row_id`: in both with other data, an UPDATE pair; only at the parent, a DELETE; only at the
snapshot, an INSERT; equal data, nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from tests.support.javaref import spark_df_to_arrow
from tests.support.oracle import normalize
from tests.support.workloads import table_properties

RowsById = dict[Any, list[tuple[Any, ...]]]

DATA = ("id", "p", "v", "d")
LINEAGE = ("_row_id", "_last_updated_sequence_number")
Row = tuple[Any, ...]  # (_row_id, _last_updated_sequence_number, *DATA)

STATEMENTS = (
    "INSERT INTO {cat}.ns.t VALUES " + ", ".join(f"({i}L, {i % 2}, 'v{i}', {i}.5D)" for i in range(1, 11)),
    "UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id IN (2, 3, 8)",
    "DELETE FROM {cat}.ns.t WHERE id = 4",
    # one statement that updates (5), deletes (1) and inserts (20)
    "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (5L, 'm', 1), (20L, 'new', 1) "
    "AS s(id, v, op)) s ON t.id = s.id "
    "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v, t.d = t.d + 1D "
    "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
    "UPDATE {cat}.ns.t SET v = v WHERE id = 6",  # rewritten, unchanged: carry-over
    "CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))",
    "UPDATE {cat}.ns.t SET v = 'after-compaction' WHERE id IN (3, 7)",
    "INSERT INTO {cat}.ns.t VALUES (21L, 1, 'x', NULL), (22L, 0, 'y', 2.5D)",
    "UPDATE {cat}.ns.t SET id = id + 100 WHERE id IN (21, 9)",  # the key itself changes: still the same row
    "DELETE FROM {cat}.ns.t WHERE id IN (2, 122)",
)


def java_rows(catalog: Any, snapshot_id: int | None) -> RowsById:
    """Java's rows at a snapshot by `_row_id` (with lineage and data columns, normalized)."""
    if snapshot_id is None:
        return {}
    return rows_by_id(java_lineage_read(catalog, snapshot_id))


def java_lineage_read(catalog: Any, snapshot_id: int) -> pa.Table:
    """`SELECT _row_id, _last_updated_sequence_number, <data> ... VERSION AS OF` by Java."""
    return spark_df_to_arrow(
        catalog.sql(f"SELECT {', '.join(LINEAGE + DATA)} FROM {{cat}}.ns.t VERSION AS OF {snapshot_id}")
    )


def rows_by_id(read: pa.Table) -> RowsById:
    rows: RowsById = {}
    for row in tuples(read, LINEAGE + DATA):
        rows.setdefault(row[0], []).append(row)
    return rows


def create_table(catalog: Any, mode: str, *, partitioned: bool = False, format_version: int = 3) -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(format_version, mode).items())
    part = " PARTITIONED BY (p)" if partitioned else ""
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string, d double) USING iceberg{part} TBLPROPERTIES ({props})"
    )


def tuples(table: pa.Table, columns: tuple[str, ...]) -> list[Row]:
    values = [table.column(c).to_pylist() for c in columns]
    return [tuple(normalize(v) for v in row) for row in zip(*values, strict=True)]


def expected_changes(parent: RowsById, child: RowsById) -> Counter[tuple[str, Row]]:
    """The changes of one snapshot by Java's row ids (each row id is one row in these tables)."""
    assert None not in parent and None not in child, "every row of a v3 table written by Java has a _row_id"
    expected: Counter[tuple[str, Row]] = Counter()
    for row_id in parent.keys() | child.keys():
        (before,) = parent.get(row_id, [None])
        (after,) = child.get(row_id, [None])
        if before is not None and after is not None:
            if before[2:] != after[2:]:
                expected[("UPDATE_BEFORE", before)] += 1
                expected[("UPDATE_AFTER", after)] += 1
        elif before is not None:
            expected[("DELETE", before)] += 1
        else:
            expected[("INSERT", after)] += 1
    return expected


def check_pairs_adjacent(changes: pa.Table) -> list[str]:
    """Each UPDATE_BEFORE is followed by the UPDATE_AFTER of the same row id."""
    kinds = changes.column("_change_type").to_pylist()
    ids = changes.column("_row_id").to_pylist()
    return [
        f"row {i}: UPDATE_BEFORE of row id {ids[i]} is followed by {kinds[i + 1] if i + 1 < len(kinds) else None}"
        for i, kind in enumerate(kinds)
        if kind == "UPDATE_BEFORE" and (i + 1 >= len(kinds) or kinds[i + 1] != "UPDATE_AFTER" or ids[i + 1] != ids[i])
    ]


def check_snapshots(
    changes: pa.Table, snapshots: Iterable[tuple[int, int | None]], rows_at: Callable[[int | None], RowsById]
) -> list[str]:
    """Every (snapshot, parent) of `snapshots` against the reads `rows_at` gives, and pair adjacency."""
    problems = check_pairs_adjacent(changes)
    snapshot_ids = changes.column("_commit_snapshot_id").to_pylist()
    kinds = changes.column("_change_type").to_pylist()
    rows = tuples(changes, LINEAGE + DATA)
    for snapshot_id, parent_id in snapshots:
        got = Counter((k, r) for k, r, s in zip(kinds, rows, snapshot_ids, strict=True) if s == snapshot_id)
        expected = expected_changes(rows_at(parent_id), rows_at(snapshot_id))
        if got != expected:
            problems.append(f"snapshot {snapshot_id} (parent {parent_id}) (_change_type, {LINEAGE + DATA}):")
            problems += [f"  icetail only: {n} x {row}" for row, n in sorted((got - expected).items(), key=repr)]
            problems += [f"  java only: {n} x {row}" for row, n in sorted((expected - got).items(), key=repr)]
    return problems
