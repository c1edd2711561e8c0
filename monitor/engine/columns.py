"""`--columns a,b`: which columns of the change rows to keep, checked against the schema up front.

The projection is of the output: the changelog columns (`_change_type`, `_change_ordinal`,
`_commit_snapshot_id`, `_commit_timestamp`, and `_schema_id` or the lineage columns when asked
for) are always kept, since a row means nothing without them; rows are read, paired and
carry-over-filtered on every column first, so dropping columns never changes which rows come out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from icetail.kernel.errors import ConfigError
from icetail.reader.split.metadata_columns import METADATA_COLUMNS, SCHEMA_ID
from icetail.reader.split.row_lineage import LINEAGE_COLUMNS

ALWAYS_KEPT = frozenset((*METADATA_COLUMNS, SCHEMA_ID, *LINEAGE_COLUMNS))


def projected_schema(schema: pa.Schema, columns: Sequence[str], flag: str = "--columns") -> pa.Schema:
    """The data columns named, in the order named, then every changelog column `schema` has."""
    data = [name for name in schema.names if name not in ALWAYS_KEPT]
    unknown = [name for name in columns if name not in schema.names]
    if unknown:
        raise ConfigError(
            f"{flag}: no column {', '.join(repr(n) for n in unknown)} in the change rows; "
            f"top-level data columns: {', '.join(data)}"
        )
    named = list(dict.fromkeys(name for name in columns if name not in ALWAYS_KEPT))
    kept = [*named, *(name for name in schema.names if name in ALWAYS_KEPT)]
    return pa.schema([schema.field(name) for name in kept], metadata=schema.metadata)


def project(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Each batch with `schema`'s columns only; closing this closes `batches` (a Spark read stops)."""
    try:
        for batch in batches:
            yield batch.select(schema.names)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
