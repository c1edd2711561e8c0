"""`icetail demo`: the real thing on embedded defaults, in about a minute.

Creates a local warehouse with a SQLite pyiceberg catalog, commits snapshots of several kinds
(appends, a delete, an overwrite, a schema change), then follows the table with the pipeline
and prints the change stream as a readable table.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.types import StringType

DEMO_CATALOG = "demo"
DEMO_TABLE = "shop.orders"


def create_demo_table(root: str) -> tuple[dict[str, str], Table]:
    """A fresh warehouse under `root` with a table and five snapshots of different kinds."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "warehouse"))
    properties = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = SqlCatalog(DEMO_CATALOG, **properties)
    catalog.create_namespace("shop")
    schema = pa.schema([("order_id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64())])
    table = catalog.create_table(DEMO_TABLE, schema=schema)
    table.append(
        pa.table({"order_id": [1, 2, 3], "customer": ["ann", "bob", "cid"], "amount": [10.0, 20.5, 7.25]}, schema)
    )
    table.append(pa.table({"order_id": [4, 5], "customer": ["dee", "eve"], "amount": [99.0, 1.5]}, schema))
    table.delete("order_id = 2")
    table.overwrite(
        pa.table({"order_id": [3], "customer": ["cid"], "amount": [8.0]}, schema),
        overwrite_filter="order_id = 3",
    )
    with table.update_schema() as update:
        update.add_column("channel", StringType())
    table = catalog.load_table(DEMO_TABLE)
    table.append(
        pa.table(
            {"order_id": [6], "customer": ["fay"], "amount": [42.0], "channel": ["web"]}, table.schema().as_arrow()
        )
    )
    env = {f"PYICEBERG_CATALOG__{DEMO_CATALOG.upper()}__{k.upper()}": v for k, v in properties.items()}
    return env, catalog.load_table(DEMO_TABLE)


def format_rows(table: pa.Table, limit: int = 40) -> str:
    """A plain text table of change rows (no pandas needed)."""
    columns = table.column_names
    rows = [[_cell(v) for v in row.values()] for row in table.slice(0, limit).to_pylist()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    if table.num_rows > limit:
        out.append(f"... {table.num_rows - limit} more rows")
    return "\n".join(out)


def _cell(value: object) -> str:
    if value is None:
        return "null"
    if hasattr(value, "isoformat"):
        return str(value.isoformat(timespec="milliseconds"))
    return str(value)


def cmd_demo(args: argparse.Namespace) -> int:
    root = os.path.abspath(args.dir)
    print(f"icetail demo: creating a warehouse and SQLite catalog under {root}")
    env, table = create_demo_table(root)
    os.environ.update(env)
    print(
        f"  committed {len(table.metadata.snapshots)} snapshots to {DEMO_TABLE}: "
        + ", ".join(s.summary.operation.value for s in table.metadata.snapshots if s.summary)
    )
    from icetail.monitor.cli.demo_pipeline import run_demo_pipeline

    return run_demo_pipeline(root, table, format_rows, env)


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience
    from icetail.monitor.cli.main import main as cli_main

    return cli_main(["demo", *(argv or [])])
