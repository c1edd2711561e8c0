"""The Iceberg history table's shape: the mirror's data columns plus the four validity columns,
keyed by the mirror's key and `_valid_from_snapshot_id` (a key has one version per snapshot).

The validity columns are `_valid_from_snapshot_id` (long, required: part of the identifier
fields), `_valid_to_snapshot_id` (long), `_valid_from` and `_valid_to` (timestamptz, the commit
times). Unlike the mirror, a history table keeps the columns the source dropped: its old versions
hold their values (`kept` in the check).
"""

from __future__ import annotations

import json

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import Schema, assign_fresh_schema_ids

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.iceberg.evolution import SOURCE_FIELD_IDS, source_field_id
from icetail.sinks.iceberg.mirror.schema import check_shape, data_schema
from icetail.sinks.keyed.history_versions import (
    VALID_FROM,
    VALID_FROM_SNAPSHOT_ID,
    VALID_TO,
    VALID_TO_SNAPSHOT_ID,
    VALIDITY_COLUMNS,
    history_key,
)

TIMESTAMPTZ = pa.timestamp("us", tz="UTC")
VALIDITY_FIELDS = (
    pa.field(VALID_FROM_SNAPSHOT_ID, pa.int64(), nullable=False),
    pa.field(VALID_TO_SNAPSHOT_ID, pa.int64()),
    pa.field(VALID_FROM, TIMESTAMPTZ),
    pa.field(VALID_TO, TIMESTAMPTZ),
)


def history_schema(changes: pa.Schema, key: tuple[str, ...]) -> Schema:
    """The Iceberg schema a missing history table is created with: data columns, validity columns,
    the key and `_valid_from_snapshot_id` as identifier fields."""
    data = data_schema(changes, key)
    clash = [f.name for f in data if f.name in VALIDITY_COLUMNS]
    if clash:
        raise SinkRejectedError(
            f"source column {clash[0]} has a name the history table uses for its validity columns; "
            "follow a projection without it, or use mode=mirror"
        )
    fresh = assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(pa.schema([*data, *VALIDITY_FIELDS])))
    ids = [fresh.find_field(k).field_id for k in history_key(key)]
    return Schema(*fresh.fields, schema_id=fresh.schema_id, identifier_field_ids=ids)


def check_history_target(existing: Schema, properties: dict[str, str], changes: pa.Schema, key: tuple[str, ...],
                         where: str) -> None:  # fmt: skip
    """Refuse (one line, SinkRejectedError) an existing history table that does not fit: its
    columns, types and identifier fields must be `history_schema`'s, plus the columns of source
    fields it followed that the source has dropped since."""
    check_shape(existing, history_schema(changes, key), where, kept=dropped_columns(existing, properties, changes))


def dropped_columns(existing: Schema, properties: dict[str, str], changes: pa.Schema) -> frozenset[str]:
    """The target's top-level columns that hold a source field `changes` no longer has."""
    known = json.loads(properties.get(SOURCE_FIELD_IDS, "{}"))
    present = {str(source_field_id(f)) for f in changes}
    top = {f.field_id: f.name for f in existing.fields}
    return frozenset(top[int(sink)] for source, sink in known.items() if source not in present and int(sink) in top)
