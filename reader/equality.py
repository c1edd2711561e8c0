"""Row identity as integers: equal rows (NULL equal to NULL) get equal codes, vectorized.

Used for equality deletes (which data rows equal some delete row on the key columns) and for
carry-over removal and update pairing (which change rows are identical or share a key). Each
column is dictionary-encoded with nulls as a value, and the per-column codes are folded into
one dense int64 per row: no Python loop per row, except for nested types Arrow cannot encode.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def row_codes(table: pa.Table) -> np.ndarray:
    """Dense int64 code per row over all columns of `table`: equal rows <=> equal codes."""
    if table.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    if table.num_columns == 0:
        return np.zeros(table.num_rows, dtype=np.int64)
    try:
        return _encoded_codes(table)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return _python_codes(table)


def rows_matching(data_keys: pa.Table, delete_keys: pa.Table) -> np.ndarray:
    """Boolean mask over `data_keys` rows: True where the row equals any row of `delete_keys`.

    Both tables must have the same column names; delete columns are cast to the data's types.
    """
    n_data = data_keys.num_rows
    if n_data == 0 or delete_keys.num_rows == 0:
        return np.zeros(n_data, dtype=bool)
    both = pa.concat_tables([data_keys, delete_keys.select(data_keys.column_names).cast(data_keys.schema)])
    codes = row_codes(both)
    return np.isin(codes[:n_data], codes[n_data:])


class DeleteKeySet:
    """The keys of equality deletes, indexed once and matched against many chunks of data."""

    def __init__(self, delete_keys: pa.Table) -> None:
        self.column_names = delete_keys.column_names
        self._table = delete_keys
        self._value_set: pa.Array | None = None
        self._sorted_ints: np.ndarray | None = None  # integer keys: sorted once, binary-searched per chunk
        self._null_deleted = False
        if delete_keys.num_columns == 1:
            column = delete_keys.column(0).combine_chunks()
            self._value_set = pc.unique(column)
            if pa.types.is_integer(column.type):
                self._null_deleted = column.null_count > 0
                self._sorted_ints = np.unique(column.drop_null().to_numpy().astype(np.int64))

    def matches(self, data_keys: pa.Table) -> np.ndarray:
        """Boolean mask over `data_keys` rows: True where the row equals a delete key (NULL = NULL)."""
        data_keys = data_keys.select(self.column_names)
        if self._value_set is None:
            return rows_matching(data_keys, self._table)
        column = data_keys.column(0)
        if self._sorted_ints is not None and pa.types.is_integer(column.type):
            return self._match_ints(column.combine_chunks())
        value_set = self._value_set.cast(column.type) if self._value_set.type != column.type else self._value_set
        mask = pc.is_in(column, value_set=value_set, skip_nulls=False)
        return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)

    def _match_ints(self, column: pa.Array) -> np.ndarray:
        assert self._sorted_ints is not None
        valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = column.fill_null(0).to_numpy().astype(np.int64)
        return np.where(valid, _int_matches(self._sorted_ints, values), self._null_deleted)


def _int_matches(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Membership of `values` in the sorted unique `sorted_keys`, by binary search."""
    if not len(sorted_keys):
        return np.zeros(len(values), dtype=bool)
    index = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return np.asarray(sorted_keys[index] == values)


def _encoded_codes(table: pa.Table) -> np.ndarray:
    combined: np.ndarray | None = None
    for column in table.columns:
        encoded = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if combined is None:
            combined = codes
        else:
            cardinality = int(codes.max()) + 1
            _, inverse = np.unique(combined * cardinality + codes, return_inverse=True)
            combined = inverse.astype(np.int64)
    assert combined is not None
    return combined


def _python_codes(table: pa.Table) -> np.ndarray:
    """Fallback for column types Arrow cannot dictionary-encode (structs, lists, maps)."""
    seen: dict[object, int] = {}
    out = np.empty(table.num_rows, dtype=np.int64)
    for i, row in enumerate(table.to_pylist()):
        out[i] = seen.setdefault(tuple(_freeze(v) for v in row.values()), len(seen))
    return out


def _freeze(value: object) -> object:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
