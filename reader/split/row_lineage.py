"""v3 row lineage: the `_row_id` and `_last_updated_sequence_number` of each row read.

The spec's rules (format/spec.md, "Row Lineage"): a value stored in the data file wins; a null or
missing `_row_id` is the file's `first_row_id` plus the row's position; a null or missing
`_last_updated_sequence_number` is the file's data sequence number. A file without a
`first_row_id` (written before the table was upgraded to v3) has no lineage: its rows read as
null, as Java reads them. The planner resolves `first_row_id` (monitor/planning/manifest_entries.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema

from icetail.kernel.model import DataFileRef

ROW_ID = "_row_id"
LAST_UPDATED_SEQUENCE_NUMBER = "_last_updated_sequence_number"
ROW_ID_FIELD_ID = 2147483540  # reserved field ids of the spec's metadata columns
LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID = 2147483539
LINEAGE_FIELD_IDS = frozenset({ROW_ID_FIELD_ID, LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID})
LINEAGE_FIELDS = (pa.field(ROW_ID, pa.int64()), pa.field(LAST_UPDATED_SEQUENCE_NUMBER, pa.int64()))
LINEAGE_COLUMNS = tuple(f.name for f in LINEAGE_FIELDS)
MIN_FORMAT_VERSION = 3


def with_lineage_fields(data_schema: pa.Schema) -> pa.Schema:
    """The data columns followed by the two lineage columns (before the changelog columns)."""
    return pa.schema(list(data_schema) + list(LINEAGE_FIELDS))


def without_lineage(rows: pa.Table) -> pa.Table:
    """`rows` without the lineage columns (read only to pair updates by `_row_id`)."""
    return rows.drop_columns([c for c in LINEAGE_COLUMNS if c in rows.column_names])


def lineage_arrays(
    batch: pa.RecordBatch, schema_of_file: Schema, row_start_inclusive: int, data_file: DataFileRef
) -> tuple[pa.Array, pa.Array]:
    """(`_row_id`, `_last_updated_sequence_number`) of the rows of `batch`, which start at file row
    `row_start_inclusive` (read with the file's schema)."""
    n = batch.num_rows
    stored_row_id = _stored(batch, schema_of_file, ROW_ID_FIELD_ID)
    stored_sequence = _stored(batch, schema_of_file, LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID)
    if data_file.first_row_id is None:
        row_id = stored_row_id if stored_row_id is not None else pa.nulls(n, pa.int64())
    else:
        start = data_file.first_row_id + row_start_inclusive
        inherited = pa.array(np.arange(start, start + n, dtype=np.int64))
        row_id = pc.coalesce(stored_row_id, inherited) if stored_row_id is not None else inherited
    # a row with a row id has lineage, so its missing sequence number is the file's
    inherited_sequence = pc.if_else(
        row_id.is_valid(), pa.scalar(data_file.data_sequence_number, pa.int64()), pa.scalar(None, pa.int64())
    )
    sequence = pc.coalesce(stored_sequence, inherited_sequence) if stored_sequence is not None else inherited_sequence
    return _plain(row_id), _plain(sequence)


def _stored(batch: pa.RecordBatch, schema_of_file: Schema, field_id: int) -> pa.Array | None:
    found = next((f for f in schema_of_file.fields if f.field_id == field_id), None)
    if found is None or found.name not in batch.schema.names:
        return None
    column = batch.column(found.name)
    return column if column.type == pa.int64() else column.cast(pa.int64())


def _plain(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values
