"""The change rows' column names the mirrors read (sinks may not import the reader; a test checks
these equal reader/split/metadata_columns.py and reader/split/row_lineage.py)."""

from __future__ import annotations

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_TIMESTAMP = "_commit_timestamp"
METADATA_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP)
SCHEMA_ID = "_schema_id"
ROW_ID = "_row_id"
LAST_UPDATED_SEQUENCE_NUMBER = "_last_updated_sequence_number"
ROW_ID_FIELD_ID = 2147483540  # the spec's reserved field id of `_row_id`
