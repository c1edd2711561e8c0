"""The demo's second half: read the change stream of the demo table and show it."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyiceberg.table import Table

from monitor.api import read_changes
from monitor.plan_report import format_plan
from monitor.planner import Planner


def run_demo_pipeline(root: str, table: Table, format_rows: Callable[[pa.Table], str]) -> int:
    print("\n$ icetail plan --catalog demo --table shop.orders")
    print(format_plan(Planner(table).plan(None, None)))
    print("\n$ icetail changes --catalog demo --table shop.orders --identifier-columns order_id --output -")
    changes = read_changes(table, identifier_columns=["order_id"])
    print(format_rows(changes))
    return 0
