"""The Iceberg history: `iceberg://CATALOG/NS.TABLE?mode=history` keeps every version of every key
of the followed table (SCD type 2), exactly once.

The Iceberg mirror (`iceberg/mirror`) with three differences. A group's rows become versions per
key and snapshot (`history_versions.version_changes`, shared with the PostgreSQL history), applied
as one overwrite snapshot that closes the open versions of the group's keys in the files that hold
them and appends the new versions (`iceberg/history/apply`); the ledger, the commit on held
metadata and the replay are the mirror's. The target has the four validity columns and is keyed by
the key and `_valid_from_snapshot_id` (`iceberg/history/schema`). And it follows the source's schema
by field id without dropping: a column the source drops stays, its old versions keep their values
and later versions hold null there (the PostgreSQL history does the same).
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from icetail.sinks.iceberg.evolution import evolve_by_field_id
from icetail.sinks.iceberg.history.apply import plan_history
from icetail.sinks.iceberg.history.schema import check_history_target, history_schema
from icetail.sinks.iceberg.mirror.apply import GroupRewrite
from icetail.sinks.iceberg.mirror.schema import source_columns
from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink
from icetail.sinks.iceberg.mirror.tasks import choose_rewrite
from icetail.sinks.keyed.history_versions import VALID_FROM_SNAPSHOT_ID, history_key, version_changes


class IcebergHistorySink(IcebergMirrorSink):
    """Keeps every version of every key of the followed table in NS.TABLE; see docs/sinks.md."""

    history = True  # a version per change: the pipeline refuses --keep-carry-over (carry-overs as versions)

    _kind = "history's"

    def _wanted_identifiers(self, table: Table) -> list[int | None]:
        """The key's target field ids and `_valid_from_snapshot_id`'s."""
        by_name = {f.name: f.field_id for f in table.schema().fields}
        return [*super()._wanted_identifiers(table), by_name.get(VALID_FROM_SNAPSHOT_ID)]

    def _target_key(self) -> tuple[str, ...]:
        return history_key(self._key)

    def _check_adopted(self, table: Table, schema: pa.Schema) -> None:
        check_history_target(table.schema(), table.properties, schema, self._key_names(schema), self._where())

    def _evolve(self, table: Table, schema: pa.Schema) -> Table:
        """Follow the source's schema by field id, dropped columns kept; commits nothing when equal."""
        key = self._key_names(schema)
        table = evolve_by_field_id(table, source_columns(schema, key), self._where())
        self._table = table
        check_history_target(table.schema(), table.properties, schema, key, self._where())
        return table

    def _plan(self, table: Table, rows: pa.Table, key: tuple[str, ...]) -> GroupRewrite:
        return plan_history(table, version_changes(rows, key), key, choose_rewrite(self._spark))

    def _table_schema(self, schema: pa.Schema) -> pa.Schema | Schema:
        return history_schema(schema, self._key_names(schema))
