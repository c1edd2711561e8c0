"""A source table for the Spark data source tests: appends, a copy-on-write update, a delete."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.types import StringType

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.float64())])


@dataclass
class SourceTable:
    catalog: SqlCatalog
    name: str  # the catalog's name (the `catalog` option)
    ident: str
    properties: dict[str, str]
    snapshot_ids: list[int] = field(default_factory=list)
    actions: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # the snapshots of each action

    def load(self) -> Any:
        return self.catalog.load_table(self.ident)

    def options(self, **extra: Any) -> dict[str, str]:
        """Options for spark.read/readStream.format('icetail')."""
        opts = {"catalog": self.name, "table": self.ident}
        opts.update({f"catalog.{k}": v for k, v in self.properties.items()})
        opts.update({k.replace("_", "-"): str(v) for k, v in extra.items()})
        return opts

    def commit(self, action: str) -> None:
        """One more snapshot of a kind named by `action` (append, delete, overwrite, upsert, evolve)."""
        table = self.load()
        n = len(self.snapshot_ids)
        if action == "append":
            rows = [{"id": n * 10 + i, "v": f"r{n}-{i}", "n": i / 4} for i in range(4)]
            table.append(pa.Table.from_pylist(rows, table.schema().as_arrow()))
        elif action == "delete":
            ids = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
            table.delete(EqualTo("id", sorted(ids)[len(ids) // 2]))  # copy-on-write: carry-overs
        elif action == "overwrite":
            rows = [{"id": 1000 + i, "v": f"o{n}-{i}", "n": None} for i in range(3)]
            table.overwrite(pa.Table.from_pylist(rows, table.schema().as_arrow()))
        elif action == "upsert":
            _rewrite_updating_two_rows(table, f"-u{n}")
        elif action == "evolve":
            with table.update_schema() as update:
                update.add_column(f"extra{n}", StringType())
            table = self.load()
            rows = [{"id": 500 + n, "v": "e", "n": 0.5, f"extra{n}": "x"}]
            table.append(pa.Table.from_pylist(rows, table.schema().as_arrow()))
        else:
            raise ValueError(action)
        known = len(self.snapshot_ids)
        self.snapshot_ids = [s.snapshot_id for s in self.load().metadata.snapshots]
        assert len(self.snapshot_ids) > known, f"{action} committed no snapshot"
        self.actions.append((action, tuple(self.snapshot_ids[known:])))


def _rewrite_updating_two_rows(table: Any, suffix: str) -> None:
    """One overwrite snapshot: every live file replaced by one file in which two rows changed `v`.

    (pyiceberg's own upsert commits a delete and an append: two snapshots, no update pairs.)
    """
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    rows = [{**row, "v": f"{row['v']}{suffix}"} if i < 2 else row for i, row in enumerate(rows)]
    rewritten = pa.Table.from_pylist(rows, table.schema().as_arrow())
    new_files = list(_dataframe_to_data_files(table.metadata, rewritten, table.io))
    with table.transaction() as tx, tx.update_snapshot().overwrite() as rewrite:
        for task in table.scan().plan_files():
            rewrite.delete_data_file(task.file)
        for data_file in new_files:
            rewrite.append_data_file(data_file)


def new_source_table(root: Path, name: str = "dsrc") -> SourceTable:
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True)
    properties = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{warehouse}"}
    catalog = SqlCatalog(name, **properties)
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=SCHEMA)
    return SourceTable(catalog, name, "ns.t", properties)
