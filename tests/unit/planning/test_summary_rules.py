"""Which rules a snapshot's summary proves (monitor/planning/summary_rules.py), on real pyiceberg tables.

No Spark: the rules read only metadata. Summaries are doctored in place (tests/support/summaries.py)
to show that an incomplete or unreadable summary proves nothing rather than something wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import LessThan
from pyiceberg.table import Table

from icetail.monitor.planning.planner import Planner
from icetail.monitor.planning.summary_rules import expectations
from tests.support.summaries import doctor_summary
from tests.support.tables import BASE_SCHEMA, make_rows


@pytest.fixture
def table(tmp_path: Path) -> Table:
    """S1 append ids 0-9, S2 append 10-14, S3 copy-on-write delete of ids < 3 (pyiceberg's writers)."""
    catalog = SqlCatalog("rules", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("ns")
    created = catalog.create_table("ns.t", schema=BASE_SCHEMA)
    created.append(make_rows(BASE_SCHEMA, range(10)))
    created.append(make_rows(BASE_SCHEMA, range(10, 15)))
    created.delete(LessThan("id", 3))
    return catalog.load_table("ns.t")


def _rules(table: Table, index: int) -> dict[str, int]:
    table = table.catalog.load_table("ns.t")  # type: ignore[attr-defined]
    snapshot = table.metadata.snapshots[index]
    plan = Planner(table).plan(snapshot.parent_snapshot_id, snapshot.snapshot_id)
    return {e.rule: e.expected for e in expectations(table.metadata, snapshot.snapshot_id, plan.tasks)}


def test_pyiceberg_summaries_prove_the_record_rules(table: Table) -> None:
    assert _rules(table, 0) == {"added-records": 10, "deleted-records": 0, "total-records": 15 - 5}
    assert _rules(table, 1) == {"added-records": 5, "deleted-records": 0, "total-records": 15}
    # the delete rewrote the file of ids 0-9 without ids 0-2: 10 deleted, 7 added (raw, before carry-over)
    assert _rules(table, 2) == {"added-records": 7, "deleted-records": 10, "total-records": 12}


def test_a_summary_without_totals_proves_nothing(table: Table) -> None:
    """Writers omit zero counts; without total-records an absent count may be unknown, not 0."""
    doctor_summary(table, table.metadata.snapshots[1].snapshot_id, total_records=None)
    assert _rules(table, 1) == {}
    # the parent's total is unknown now; its total-delete-files, still written, still counts
    assert _rules(table, 2) == {"added-records": 7, "deleted-records": 10}


def test_an_unreadable_count_drops_only_its_rule(table: Table) -> None:
    doctor_summary(table, table.metadata.snapshots[2].snapshot_id, deleted_records="ten")
    assert _rules(table, 2) == {"added-records": 7, "total-records": 12}


def test_a_replace_snapshot_expects_nothing(table: Table) -> None:
    from pyiceberg.table.snapshots import Operation

    doctor_summary(table, table.metadata.snapshots[2].snapshot_id, operation=Operation.REPLACE.value)
    assert _rules(table, 2) == {}
