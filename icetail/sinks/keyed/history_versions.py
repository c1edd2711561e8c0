"""History (SCD type 2): every version of a key a row, valid from the snapshot that wrote it to the
snapshot that replaced or deleted it (NULL while current). Pure Arrow: what a chunk adds and closes.

Shared by the history modes of the PostgreSQL mirror (postgres/apply_history.py) and the Iceberg
mirror (iceberg/history/); each applies the same `VersionChanges` to its target.

Versions are per snapshot, not per chunk or batch: the local merge runs per (key, snapshot), so a
key changed in three snapshots of one chunk gets three versions, each closed by the next. A
snapshot whose net change of a key is a delete adds no version and closes the open one. Carry-over
rows (a compaction, an UPDATE that changes nothing) never reach the sink (the pipeline cancels
them), so they make no version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.sinks.change_columns import CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP
from icetail.sinks.keyed.merge import DELETE, FRESH, local_merge, same_key_as_previous

VALID_FROM_SNAPSHOT_ID = "_valid_from_snapshot_id"
VALID_TO_SNAPSHOT_ID = "_valid_to_snapshot_id"
VALID_FROM = "_valid_from"
VALID_TO = "_valid_to"
VALIDITY_COLUMNS = (VALID_FROM_SNAPSHOT_ID, VALID_TO_SNAPSHOT_ID, VALID_FROM, VALID_TO)
VERSION, CLOSE, CLOSE_FRESH = "V", "C", "F"  # stage ops: a new version; close the key's open version (F: none expected)


@dataclass(frozen=True)
class VersionChanges:
    """Rows with the data columns and the four validity columns, and what each one is."""

    rows: pa.Table
    ops: pa.Array  # V: insert as a version; C/F: close the key's open version at this row's _valid_from*
    duplicates: int  # inserts of a key that had a version already (within the chunk)


def history_key(key: Sequence[str]) -> tuple[str, ...]:
    """A history table's primary key: the key and the snapshot a version starts at."""
    return (*key, VALID_FROM_SNAPSHOT_ID)


def version_changes(rows: pa.Table, key: Sequence[str]) -> VersionChanges:
    """The versions `rows` (a chunk's change rows) add and the open versions they close."""
    net = local_merge(rows, (*key, CHANGE_ORDINAL), key_order=True)  # per key and snapshot, sorted so
    merged, ops = net.rows, np.asarray(net.ops.to_pylist(), dtype=object)
    n = merged.num_rows
    if n == 0:
        return VersionChanges(merged, pa.array([], pa.string()), 0)
    same_next = same_key_as_previous(merged, key)  # [i]: row i + 1 is the same key as row i
    snapshot, stamp = merged.column(COMMIT_SNAPSHOT_ID), merged.column(COMMIT_TIMESTAMP)
    has_next = np.concatenate((same_next, [False]))  # sorted by key then ordinal: the next version is row i + 1
    take_next = pa.array(np.where(has_next, np.arange(n) + 1, 0))
    valid_to_snapshot = pc.if_else(pa.array(has_next), snapshot.take(take_next), pa.scalar(None, pa.int64()))
    valid_to = pc.if_else(pa.array(has_next), stamp.take(take_next), pa.scalar(None, stamp.type))
    stamped = (
        merged.append_column(VALID_FROM_SNAPSHOT_ID, snapshot)
        .append_column(VALID_TO_SNAPSHOT_ID, valid_to_snapshot)
        .append_column(VALID_FROM, stamp)
        .append_column(VALID_TO, valid_to)
    )
    first = np.concatenate(([True], ~same_next))
    adds = ops != DELETE
    # within the chunk: a fresh insert of a key whose previous snapshot left a version
    duplicates = net.duplicates + int(np.count_nonzero(same_next & (ops[1:] == FRESH) & adds[:-1]))
    closing_ops = np.where(ops[first] == FRESH, CLOSE_FRESH, CLOSE)
    out = pa.concat_tables([stamped.filter(pa.array(adds)), stamped.filter(pa.array(first))])
    op_values = [VERSION] * int(np.count_nonzero(adds)) + closing_ops.tolist()
    return VersionChanges(out, pa.array(op_values, pa.string()), duplicates)
