"""UPDATE pairing against Java's own changelog (`create_changelog_view`, compute_updates => true).

Java's changelog scan does not read delete files, so these tables are copy-on-write with unique
identifier values; on them icetail's rows must equal Java's changelog view row for row (data
columns, _change_type, _change_ordinal, _commit_snapshot_id).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from tests.support.engines import changes_by_engine
from tests.support.oracle import assert_changes_match, row_tuples
from tests.support.workloads import COW, table_properties

COLUMNS = ("id", "p", "v", "d")
KEYS = (*COLUMNS, "_change_type", "_change_ordinal", "_commit_snapshot_id")


def _multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(row_tuples(table, KEYS))


def _report(icetail: Counter[tuple[Any, ...]], java: Counter[tuple[Any, ...]]) -> str:
    lines = [f"columns {KEYS}"]
    for label, diff in (("icetail only", icetail - java), ("java only", java - icetail)):
        for row, n in sorted(diff.items(), key=repr):
            lines.append(f"  {label}: {n} x {row}")
    return "\n".join(lines)


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_update_pairs_match_java_changelog(catalog, partitioned) -> None:
    from icetail.monitor.engine.api import read_changes

    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, COW).items())
    part = " PARTITIONED BY (p)" if partitioned else ""
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string, d double) USING iceberg{part} "
                f"TBLPROPERTIES ({props})")
    rows = ", ".join(f"({i}L, {i % 2}, 'v{i}', {i}.5D)" for i in range(1, 11))
    for stmt in (
        f"INSERT INTO {{cat}}.ns.t VALUES {rows}",
        "UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id IN (2, 3, 8)",
        "DELETE FROM {cat}.ns.t WHERE id IN (4, 9)",
        "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (5L, 'm', 1), (20L, 'new', 1) "
        "AS s(id, v, op)) s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v, t.d = t.d + 1D "
        "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
        "UPDATE {cat}.ns.t SET v = v WHERE id = 6",
        "INSERT INTO {cat}.ns.t VALUES (21L, 1, 'x', NULL)",
        "UPDATE {cat}.ns.t SET d = NULL, v = 'z' WHERE id IN (7, 21)",
    ):
        catalog.sql(stmt)
    ids = catalog.snapshot_ids("t")
    table = catalog.load_table("t")
    problems = []
    for from_id, to_id in [(None, None), (ids[0], ids[3]), (ids[3], ids[-1])]:
        java = catalog.java_changelog("t", from_id, to_id, identifier_columns=["id"])
        icetail = changes_by_engine(read_changes, table, from_id, to_id, identifier_columns=["id"])["local"]
        a, b = _multiset(icetail), _multiset(java)
        if a != b:
            problems.append(f"range ({from_id}, {to_id}] of {catalog.fq('t')}:\n{_report(a, b)}")
        try:
            assert_changes_match(icetail, catalog, "t", from_id, to_id, identifier_columns=["id"])
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)
