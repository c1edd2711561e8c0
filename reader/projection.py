"""Field-id projection of file batches onto a table schema, delegated to pyiceberg.

Renames, added columns (null), dropped columns and promoted types all follow from matching by
field id; pyiceberg already implements the spec's rules, so this module only adapts its API.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.io.pyarrow import _to_requested_schema, pyarrow_to_schema, schema_to_pyarrow
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table.name_mapping import NameMapping

from state.errors import MetadataError


def file_schema(physical: pa.Schema, name_mapping: NameMapping | None, format_version: int) -> Schema:
    """The Iceberg schema of a data or delete file, from its field ids (or the table's name mapping)."""
    try:
        return pyarrow_to_schema(
            physical,
            name_mapping,
            downcast_ns_timestamp_to_us=format_version <= 2,
            format_version=format_version,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise MetadataError(f"{exc}; set the table property schema.name-mapping.default") from exc


def columns_to_read(schema_of_file: Schema, field_ids: set[int]) -> list[str]:
    """Top-level physical column names that hold any of `field_ids`."""
    present = field_ids & schema_of_file.field_ids
    if not present:
        return []
    pruned = prune_columns(schema_of_file, present, select_full_types=False)
    return [column.name for column in pruned.columns]


def project(batch: pa.RecordBatch, schema_of_file: Schema, requested: Schema, format_version: int) -> pa.RecordBatch:
    """`batch` (read with the file's schema) as `requested`, matched by field id."""
    return _to_requested_schema(
        requested,
        schema_of_file,
        batch,
        downcast_ns_timestamp_to_us=format_version <= 2,
        allow_timestamp_tz_mismatch=True,
    )


def arrow_schema(schema: Schema) -> pa.Schema:
    return schema_to_pyarrow(schema, include_field_ids=False)
