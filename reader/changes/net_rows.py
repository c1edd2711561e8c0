"""The net change rows of a range, with the columns to output: what every `--net` read ends in.

The fold itself is net.py's; here the row lineage it is read and output with (`NetLineage`), the
snapshots read whole (release.py) and the columns rows pair on (`net_key_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.model import ChangeTask
from icetail.reader.changes.net import fold_range, net_key_columns
from icetail.reader.changes.read_setup import change_arrow_schema
from icetail.reader.changes.release import snapshots_needing_reconcile
from icetail.reader.split.row_lineage import without_lineage


@dataclass(frozen=True)
class NetLineage:
    """Row lineage in a net fold: `keyed`, rows are followed by `_row_id` (a v3 table), so every
    split reads it; `output`, the net rows keep the lineage columns (`--with-row-lineage`)."""

    keyed: bool
    output: bool

    @property
    def reads(self) -> bool:
        return self.keyed or self.output

    def read_schema(self, table: Table, schema_id: int | None, *, with_schema_id: bool) -> pa.Schema:
        return change_arrow_schema(table, schema_id, with_schema_id=with_schema_id, with_row_lineage=self.reads)

    def output_rows(self, rows: pa.Table) -> pa.Table:
        return rows if self.output else without_lineage(rows)


def net_rows(
    lineage: NetLineage,
    schema: pa.Schema,
    batches: Iterable[tuple[int, pa.RecordBatch]],
    tasks: Iterable[ChangeTask],
    identifiers: Sequence[str],
) -> pa.Table:
    """The net change rows of a range read with `schema` (net.py), with the columns to output."""
    net = fold_range(schema, batches, snapshots_needing_reconcile(tasks), row_lineage=lineage.keyed)
    return lineage.output_rows(net.result(net_key_columns(schema, identifiers)))
