"""The local merge: a chunk's change rows folded to one net change per key, in commit order.

Shared by the mirrors (PostgreSQL: postgres/, Iceberg: iceberg/mirror/).

Why: applying rows one by one (or "all updates, then all deletes") is where JDBC upsert sinks
lose or resurrect rows. Here the rows of a key are ordered by commit (`_change_ordinal`, the
snapshot's place in the stream), then within one snapshot deletes (DELETE, UPDATE_BEFORE) before
inserts (INSERT, UPDATE_AFTER), then by their place in the chunk; the last one decides:

* an inserting change -> the key's row is upserted with it;
* a deleting change -> the key is deleted.

An UPDATE pair whose before-key differs from its after-key is a delete of one key and an insert
of another, so the old key goes. A key whose first change in the chunk is an INSERT is marked
fresh (op `I`): the target should not hold it yet, so finding it there means the source holds the
key twice (counted as a duplicate; docs/sinks.md). Two inserting changes of a key with no delete
between them are duplicates within the chunk. Pure pyarrow/numpy: no database here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.change_columns import CHANGE_ORDINAL, CHANGE_TYPE

INSERTING = ("INSERT", "UPDATE_AFTER")
DELETE, FRESH, UPSERT = "D", "I", "U"  # the net ops


@dataclass(frozen=True)
class NetChanges:
    """One row per key: the key's last change (all columns of `rows`) and what to do with it."""

    rows: pa.Table
    ops: pa.Array  # string: D (delete the key) | I (insert; the key should be absent) | U (upsert)
    duplicates: int  # inserting changes that followed an inserting change of the same key

    def count(self, op: str) -> int:
        return int(pc.sum(pc.equal(self.ops, op)).as_py() or 0) if len(self.ops) else 0


def local_merge(rows: pa.Table, key: Sequence[str], *, key_order: bool = False) -> NetChanges:
    """The net change of each key of `rows` (change rows with `_change_type` and `_change_ordinal`),
    in the chunk's order, or sorted by `key` with `key_order`."""
    n = rows.num_rows
    for name in key:
        nulls = rows.column(name).null_count
        if nulls:
            raise SinkRejectedError(
                f"mirror key column {name!r} is null in {nulls} change row(s); a key must never be null: "
                "name key columns that are never null with --identifier-columns"
            )
    if n == 0:
        return NetChanges(rows, pa.array([], pa.string()), 0)
    inserting = pc.is_in(rows.column(CHANGE_TYPE), value_set=pa.array(INSERTING)).to_numpy(zero_copy_only=False)
    if inserting.all() and _distinct_numbers(rows, key):
        # inserts of distinct keys (an append, a first load): nothing to fold
        return NetChanges(rows, pa.nulls(n, pa.string()).fill_null(FRESH), 0)
    helper: dict[str, pa.Array | pa.ChunkedArray] = {
        f"k{i}": _sortable(rows.column(name)) for i, name in enumerate(key)
    }
    helper |= {"o": rows.column(CHANGE_ORDINAL), "i": pa.array(inserting.astype(np.int8)), "p": pa.array(np.arange(n))}
    order = pc.sort_indices(pa.table(helper), [(c, "ascending") for c in helper]).to_numpy()
    same_as_previous = np.ones(n - 1, dtype=bool)
    for i in range(len(key)):
        column = _take(helper[f"k{i}"], order)
        same_as_previous &= pc.equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    starts = np.concatenate(([True], ~same_as_previous))  # the first change of each key
    ends = np.concatenate((~same_as_previous, [True]))  # the last change of each key
    ins = inserting[order]
    first_inserting = ins[starts][np.cumsum(starts) - 1]  # per row: whether its key's first change inserts
    duplicates = int(np.count_nonzero(same_as_previous & ins[1:] & ins[:-1]))
    last_ins = ins[ends]
    codes = np.where(last_ins, np.where(first_inserting[ends], 1, 2), 0)
    chosen = order[ends]
    if not key_order:  # in the chunk's order: a take of ascending rows is ~10x cheaper (strings)
        ascending = np.argsort(chosen, kind="stable")
        chosen, codes = chosen[ascending], codes[ascending]
    ops = pa.array([DELETE, FRESH, UPSERT], pa.string()).take(pa.array(codes))
    return NetChanges(rows.take(pa.array(chosen)), ops, duplicates)


def _distinct_numbers(rows: pa.Table, key: Sequence[str]) -> bool:
    """Whether a one-column integer key holds distinct values (numpy's sort: Arrow's count_distinct
    costs ~10x more)."""
    if len(key) != 1 or not pa.types.is_integer(rows.schema.field(key[0]).type):
        return False
    values = np.sort(rows.column(key[0]).to_numpy())
    return bool((values[1:] != values[:-1]).all())


def same_key_as_previous(rows: pa.Table, key: Sequence[str]) -> np.ndarray:
    """For rows sorted by `key`: whether row i + 1 has the key of row i (length n - 1)."""
    n = rows.num_rows
    same = np.ones(max(n - 1, 0), dtype=bool)
    for name in key:
        column = _sortable(rows.column(name))
        same &= pc.equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return same


def _sortable(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`column` as one array of a type sort_indices and equal take (an extension type by its storage)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage
    return array


def _take(array: pa.Array | pa.ChunkedArray, order: np.ndarray) -> pa.Array:
    return _sortable(array).take(pa.array(order))
