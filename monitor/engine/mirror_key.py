"""The key a mirror sink applies changes by, and so the key the pipeline pairs updates by.

`--identifier-columns`, else the table's identifier fields, else (format-version 3) the row
lineage `_row_id`. A table with none of them cannot be mirrored: refused at start, saying how
to give a key.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.reader.changes.read_setup import has_row_lineage, identifier_names
from icetail.reader.split.row_lineage import ROW_ID


def mirror_key(table: Table, schema_id: int | None, requested: Sequence[str] | None) -> tuple[str, ...]:
    """The mirror key of `table` at schema `schema_id` (None: the current one)."""
    names = identifier_names(table, schema_id, requested)
    if names:
        return names
    if has_row_lineage(table):
        return (ROW_ID,)
    name = ".".join(table.name())
    raise ConfigError(
        f"table {name} has no key to mirror by (no identifier fields, format-version "
        f"{table.metadata.format_version} so no _row_id): give one with --identifier-columns COL[,COL...], or set "
        f"the table's identifier fields (Spark SQL: ALTER TABLE {name} SET IDENTIFIER FIELDS COL)"
    )


def keyed_by_row_id(key: Sequence[str] | None) -> bool:
    """Whether the rows must carry `_row_id`, the mirror's key."""
    return key is not None and tuple(key) == (ROW_ID,)
