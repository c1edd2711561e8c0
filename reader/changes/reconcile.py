"""Per-snapshot post-processing of change rows: update pairing and carry-over removal.

Row lineage first (v3 tables, rows read with `_row_id`): one DELETE and one INSERT of the
snapshot with the same `_row_id` are the same row before and after the commit; equal data
columns make it a carry-over (dropped), different ones an UPDATE_BEFORE / UPDATE_AFTER pair.
The rows lineage does not pair (no row id, or a row id on one side only) then go through the
rules for tables without lineage: carry-over removal cancels identical DELETE/INSERT pairs as a
multiset (two identical deletes and one identical insert leave one delete; it is what a
copy-on-write rewrite by a writer that does not keep lineage needs), and after that one DELETE
and one INSERT with equal identifier values become UPDATE_BEFORE / UPDATE_AFTER; keys with
several rows on a side stay DELETE/INSERT. docs/semantics.md, "Update pairing", says why
lineage comes first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.model import ChangeType
from icetail.reader.split.equality import row_codes
from icetail.reader.split.metadata_columns import CHANGE_TYPE, COMMIT_SNAPSHOT_ID, METADATA_COLUMNS
from icetail.reader.split.row_lineage import LINEAGE_COLUMNS, ROW_ID

HIDDEN_PREFIX = "__icetail_"  # bookkeeping columns a caller may carry through; never compared


def needs_reconcile(
    changes: pa.Table,
    identifier_columns: Sequence[str] | None,
    remove_carry_over: bool,
    row_lineage: bool = False,
) -> bool:
    """Only a snapshot with both deletes and inserts can hold carry-overs or updates."""
    if not (remove_carry_over or identifier_columns or row_lineage):
        return False
    types = set(pc.unique(changes.column(CHANGE_TYPE)).to_pylist()) if changes.num_rows else set()
    return ChangeType.DELETE.value in types and ChangeType.INSERT.value in types


def reconcile_snapshot(
    changes: pa.Table,
    identifier_columns: Sequence[str] | None = None,
    remove_carry_over: bool = True,
    *,
    row_lineage: bool = False,
) -> pa.Table:
    """Changes of ONE snapshot (DELETE/INSERT rows) after update pairing and carry-over removal.

    `row_lineage`: pair by the `_row_id` column first (the table must have it). Output order:
    DELETEs, then UPDATE_BEFORE/UPDATE_AFTER pairs (in the order of their DELETE), then INSERTs;
    stable otherwise.
    """
    if not needs_reconcile(changes, identifier_columns, remove_carry_over, row_lineage):
        return changes
    if len(pc.unique(changes.column(COMMIT_SNAPSHOT_ID))) > 1:
        raise ValueError("reconcile_snapshot takes the changes of one snapshot")
    is_delete = pc.equal(changes.column(CHANGE_TYPE), ChangeType.DELETE.value).to_numpy(zero_copy_only=False)
    ignored = set(METADATA_COLUMNS) | set(LINEAGE_COLUMNS)
    data_columns = [c for c in changes.column_names if c not in ignored and not c.startswith(HIDDEN_PREFIX)]
    n = changes.num_rows
    dropped = np.zeros(n, dtype=bool)
    settled = np.zeros(n, dtype=bool)  # decided by lineage: paired, dropped or kept as they are
    befores: list[np.ndarray] = []
    afters: list[np.ndarray] = []
    content: np.ndarray | None = None
    if row_lineage and ROW_ID in changes.column_names:
        before, after = _lineage_pairs(changes.column(ROW_ID), is_delete)
        content = row_codes(changes.select(data_columns))
        unchanged = content[before] == content[after]
        settled[before] = settled[after] = True
        if remove_carry_over:
            dropped[before[unchanged]] = dropped[after[unchanged]] = True
        befores.append(before[~unchanged])
        afters.append(after[~unchanged])
    rest = np.nonzero(~settled)[0]
    if remove_carry_over and len(rest):
        codes = content[rest] if content is not None else row_codes(changes.select(data_columns).take(rest))
        dropped[rest[_cancelled(codes, is_delete[rest])]] = True
    if identifier_columns:
        rest = np.nonzero(~settled & ~dropped)[0]
        key_codes = row_codes(changes.select(list(identifier_columns)).take(rest))
        before, after = _key_pairs(key_codes, is_delete[rest])
        befores.append(rest[before])
        afters.append(rest[after])
    return _ordered(changes, is_delete, dropped, _concat(befores), _concat(afters))


def settle_by_lineage(changes: pa.Table, remove_carry_over: bool = True) -> tuple[pa.Table, pa.Table]:
    """(what lineage settles, as reconcile_snapshot outputs it; the rows it leaves to the other rules).

    The first step of `reconcile_snapshot` on its own, for a shuffled reconciliation whose first
    phase is partitioned by `_row_id`: a settled row never takes part in a later rule there, so
    `reconcile_snapshot(rest, ..., row_lineage=False)` finishes what `reconcile_snapshot` would
    have done with the rest. Settled output: UPDATE pairs, and unchanged pairs as DELETE/INSERT
    when carry-overs are kept.
    """
    if not changes.num_rows or ROW_ID not in changes.column_names:
        return changes.slice(0, 0), changes
    is_delete = pc.equal(changes.column(CHANGE_TYPE), ChangeType.DELETE.value).to_numpy(zero_copy_only=False)
    before, after = _lineage_pairs(changes.column(ROW_ID), is_delete)
    settled = np.zeros(changes.num_rows, dtype=bool)
    settled[before] = settled[after] = True
    rest = changes.filter(pa.array(~settled))
    if not len(before):
        return changes.slice(0, 0), rest
    ignored = set(METADATA_COLUMNS) | set(LINEAGE_COLUMNS)
    data_columns = [c for c in changes.column_names if c not in ignored and not c.startswith(HIDDEN_PREFIX)]
    content = row_codes(changes.select(data_columns))
    unchanged = content[before] == content[after]
    dropped = np.zeros(changes.num_rows, dtype=bool)
    if remove_carry_over:
        dropped[before[unchanged]] = dropped[after[unchanged]] = True
    out = _ordered(changes, is_delete, dropped | ~settled, before[~unchanged], after[~unchanged])
    return out, rest


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


def _lineage_pairs(row_ids: pa.ChunkedArray | pa.Array, is_delete: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(DELETE rows, their INSERT rows): row ids with exactly one DELETE and one INSERT; null ids never pair."""
    valid = row_ids.is_valid().to_numpy(zero_copy_only=False)
    ids = pc.fill_null(row_ids, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    rows = np.nonzero(valid)[0]
    if not len(rows):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    _, codes = np.unique(ids[rows], return_inverse=True)
    before, after = _key_pairs(codes.astype(np.int64), is_delete[rows])
    return rows[before], rows[after]


def _key_pairs(key_codes: np.ndarray, is_delete: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(DELETE rows, their INSERT rows), by index into `key_codes`: keys with exactly one of each."""
    if not len(key_codes):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    paired = _paired(key_codes, is_delete)
    before = np.nonzero(is_delete & paired)[0]
    after = np.nonzero(~is_delete & paired)[0]
    after_by_key = dict(zip(key_codes[after].tolist(), after.tolist(), strict=True))
    matched = np.array([after_by_key[k] for k in key_codes[before].tolist()], dtype=np.int64)
    return before, matched


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


def _ordered(
    changes: pa.Table, is_delete: np.ndarray, dropped: np.ndarray, before: np.ndarray, after: np.ndarray
) -> pa.Table:
    """DELETEs, then UPDATE_BEFORE/UPDATE_AFTER pairs (each before next to its after), then INSERTs."""
    paired = np.zeros(len(is_delete), dtype=bool)
    paired[before] = paired[after] = True
    plain = ~paired & ~dropped
    parts = [changes.take(pa.array(np.nonzero(is_delete & plain)[0], pa.int64()))]
    if len(before):
        order = np.argsort(before, kind="stable")
        interleaved = np.empty(2 * len(before), dtype=np.int64)
        interleaved[0::2], interleaved[1::2] = before[order], after[order]
        kinds = [ChangeType.UPDATE_BEFORE.value, ChangeType.UPDATE_AFTER.value] * len(before)
        updates = changes.take(pa.array(interleaved))
        position = updates.column_names.index(CHANGE_TYPE)
        updates = updates.set_column(position, updates.field(position), pa.array(kinds, updates.field(position).type))
        parts.append(updates)
    parts.append(changes.take(pa.array(np.nonzero(~is_delete & plain)[0], pa.int64())))
    return pa.concat_tables(parts)


# The same multiset rules, shared with net changes over a range (reader/changes/net.py).
cancelled_rows = _cancelled
one_delete_one_insert = _paired
lineage_pairs = _lineage_pairs
