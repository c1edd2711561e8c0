"""Per-snapshot post-processing of change rows: carry-over removal and update pairing.

Carry-over: a copy-on-write rewrite deletes a file and re-inserts its unchanged rows; an
identical DELETE/INSERT pair inside one snapshot is no change, cancelled as a multiset (two
identical deletes and one identical insert leave one delete). Update pairing: after that, one
DELETE and one INSERT of the same snapshot with equal identifier values become UPDATE_BEFORE /
UPDATE_AFTER; keys with several rows on a side stay DELETE/INSERT.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.model import ChangeType
from icetail.reader.equality import row_codes
from icetail.reader.metadata_columns import CHANGE_TYPE, COMMIT_SNAPSHOT_ID, METADATA_COLUMNS

HIDDEN_PREFIX = "__icetail_"  # bookkeeping columns a caller may carry through; never compared


def needs_reconcile(changes: pa.Table, identifier_columns: Sequence[str] | None, remove_carry_over: bool) -> bool:
    """Only a snapshot with both deletes and inserts can hold carry-overs or updates."""
    if not (remove_carry_over or identifier_columns):
        return False
    types = set(pc.unique(changes.column(CHANGE_TYPE)).to_pylist()) if changes.num_rows else set()
    return ChangeType.DELETE.value in types and ChangeType.INSERT.value in types


def reconcile_snapshot(
    changes: pa.Table, identifier_columns: Sequence[str] | None = None, remove_carry_over: bool = True
) -> pa.Table:
    """Changes of ONE snapshot (DELETE/INSERT rows) after carry-over removal and update pairing.

    Output order: DELETEs, then UPDATE_BEFORE/UPDATE_AFTER pairs, then INSERTs; stable otherwise.
    """
    if not needs_reconcile(changes, identifier_columns, remove_carry_over):
        return changes
    if len(pc.unique(changes.column(COMMIT_SNAPSHOT_ID))) > 1:
        raise ValueError("reconcile_snapshot takes the changes of one snapshot")
    is_delete = pc.equal(changes.column(CHANGE_TYPE), ChangeType.DELETE.value).to_numpy(zero_copy_only=False)
    data_columns = [c for c in changes.column_names if c not in METADATA_COLUMNS and not c.startswith(HIDDEN_PREFIX)]
    keep = np.ones(changes.num_rows, dtype=bool)
    if remove_carry_over:
        keep = ~_cancelled(row_codes(changes.select(data_columns)), is_delete)
    changes, is_delete = changes.filter(pa.array(keep)), is_delete[keep]
    if not identifier_columns:
        return _ordered(changes, is_delete, np.zeros(changes.num_rows, dtype=bool), None)
    key_codes = row_codes(changes.select(list(identifier_columns)))
    return _ordered(changes, is_delete, _paired(key_codes, is_delete), key_codes)


def _cancelled(codes: np.ndarray, is_delete: np.ndarray) -> np.ndarray:
    """Rows cancelled by an identical row of the other kind: the first min(d, i) of each."""
    cancelled = np.zeros(len(codes), dtype=bool)
    n_codes = int(codes.max()) + 1 if len(codes) else 0
    deletes_per_code = np.bincount(codes[is_delete], minlength=n_codes)
    inserts_per_code = np.bincount(codes[~is_delete], minlength=n_codes)
    for side, other in ((is_delete, inserts_per_code), (~is_delete, deletes_per_code)):
        index = np.nonzero(side)[0]
        rank = _rank_within(codes[index])
        cancelled[index] = rank < other[codes[index]]
    return cancelled


def _rank_within(codes: np.ndarray) -> np.ndarray:
    """0-based occurrence number of each element among equal codes, in input order."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(codes)]))
    rank = np.empty(len(codes), dtype=np.int64)
    rank[order] = np.arange(len(codes)) - group_start
    return rank


def _paired(key_codes: np.ndarray, is_delete: np.ndarray) -> np.ndarray:
    """Rows whose key has exactly one DELETE and one INSERT in the snapshot."""
    if not len(key_codes):
        return np.zeros(0, dtype=bool)
    n = int(key_codes.max()) + 1
    deletes = np.bincount(key_codes[is_delete], minlength=n)
    inserts = np.bincount(key_codes[~is_delete], minlength=n)
    return (deletes[key_codes] == 1) & (inserts[key_codes] == 1)


def _ordered(changes: pa.Table, is_delete: np.ndarray, paired: np.ndarray, key_codes: np.ndarray | None) -> pa.Table:
    """DELETEs, then UPDATE_BEFORE/UPDATE_AFTER pairs (each before next to its after), then INSERTs."""
    deletes = np.nonzero(is_delete & ~paired)[0]
    inserts = np.nonzero(~is_delete & ~paired)[0]
    parts = [changes.take(pa.array(deletes, pa.int64()))]
    if key_codes is not None and paired.any():
        before = np.nonzero(is_delete & paired)[0]
        after = np.nonzero(~is_delete & paired)[0]
        # each paired key has one row per side: sort the afters by key in the befores' order
        after_by_key = dict(zip(key_codes[after].tolist(), after.tolist(), strict=True))
        matched = np.array([after_by_key[k] for k in key_codes[before].tolist()], dtype=np.int64)
        interleaved = np.empty(2 * len(before), dtype=np.int64)
        interleaved[0::2], interleaved[1::2] = before, matched
        kinds = [ChangeType.UPDATE_BEFORE.value, ChangeType.UPDATE_AFTER.value] * len(before)
        updates = changes.take(pa.array(interleaved))
        position = updates.column_names.index(CHANGE_TYPE)
        updates = updates.set_column(position, updates.field(position), pa.array(kinds, updates.field(position).type))
        parts.append(updates)
    parts.append(changes.take(pa.array(inserts, pa.int64())))
    return pa.concat_tables(parts)


# The same multiset rules, shared with net changes over a range (reader/net.py).
cancelled_rows = _cancelled
one_delete_one_insert = _paired
