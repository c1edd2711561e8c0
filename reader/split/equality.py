"""Row identity as integers: equal rows (NULL equal to NULL) get equal codes, vectorized.

Used for equality deletes (which data rows equal some delete row on the key columns) and for
carry-over removal and update pairing (which change rows are identical or share a key). Each
column is dictionary-encoded with nulls as a value, and the per-column codes are folded into
one dense int64 per row: no Python loop per row, except one over the rows of list and map
columns (whose values are sequences of their elements' codes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.reader.split.sorted_sets import sorted_unique


def row_codes(table: pa.Table) -> np.ndarray:
    """Dense int64 code per row over all columns of `table`: equal rows <=> equal codes."""
    if table.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    if table.num_columns == 0:
        return np.zeros(table.num_rows, dtype=np.int64)
    return _encoded_codes(table)


def rows_matching(data_keys: pa.Table, delete_keys: pa.Table) -> np.ndarray:
    """Boolean mask over `data_keys` rows: True where the row equals any row of `delete_keys`.

    Both tables must have the same column names; delete columns are cast to the data's types.
    """
    n_data = data_keys.num_rows
    if n_data == 0 or delete_keys.num_rows == 0:
        return np.zeros(n_data, dtype=bool)
    both = pa.concat_tables([data_keys, delete_keys.select(data_keys.column_names).cast(data_keys.schema)])
    codes = row_codes(both)
    return np.isin(codes[:n_data], codes[n_data:])  # codes are dense (0..n): numpy's table path


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
                self._sorted_ints = sorted_unique(column.drop_null().to_numpy().astype(np.int64))

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
    return _combine([_column_codes(column.combine_chunks()) for column in table.columns])


_MAX_MIXED = 1 << 62  # mixed codes stay below this: no int64 overflow


def _combine(parts: list[np.ndarray]) -> np.ndarray:
    """Dense codes of the tuples (parts[0][i], parts[1][i], ...).

    Columns are mixed as digits of one int64 (in the tuples' order) and made dense only when the
    next digit would overflow, and once at the end: a sort per few columns, not per column.
    """
    combined = parts[0]
    bound = int(combined.max()) + 1 if len(combined) else 1  # exclusive bound of `combined`
    for codes in parts[1:]:
        cardinality = int(codes.max()) + 1 if len(codes) else 1
        if bound * cardinality > _MAX_MIXED:
            combined = _dense(combined)
            bound = int(combined.max()) + 1 if len(combined) else 1
        combined = combined * cardinality + codes
        bound *= cardinality
    return _dense(combined) if len(parts) > 1 else combined


def _dense(codes: np.ndarray) -> np.ndarray:
    _, inverse = np.unique(codes, return_inverse=True)
    return np.asarray(inverse, dtype=np.int64).reshape(-1)


def _column_codes(array: pa.Array) -> np.ndarray:
    """Dense codes of one column: equal values (NULL = NULL, NaN = NaN) <=> equal codes.

    Structs fold their children's codes with their own validity; lists and maps become the
    sequence of their elements' codes (a map's entries sorted, since a map has no order).
    """
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    kind = array.type
    if pa.types.is_struct(kind):
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.int64)
        children = [_column_codes(pc.struct_field(array, [i])) for i in range(kind.num_fields)]
        return _combine([valid, *children])
    if pa.types.is_map(kind):
        entries = array.values
        entry_codes = _combine([_column_codes(pc.struct_field(entries, [i])) for i in (0, 1)])
        return _sequence_codes(array, entry_codes, unordered=True)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _sequence_codes(array, _column_codes(array.values), unordered=False)
    try:
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return _python_codes(array.to_pylist())


def _sequence_codes(array: pa.Array, element_codes: np.ndarray, unordered: bool) -> np.ndarray:
    """Codes of list-like values from their elements' codes (offsets index the unsliced children)."""
    offsets = array.offsets.to_numpy()
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    seen: dict[bytes | None, int] = {}
    out = np.empty(len(array), dtype=np.int64)
    for i in range(len(array)):
        key = None
        if valid[i]:
            segment = element_codes[offsets[i] : offsets[i + 1]]
            key = (np.sort(segment) if unordered else segment).tobytes()
        out[i] = seen.setdefault(key, len(seen))
    return out


def _python_codes(values: list[object]) -> np.ndarray:
    """Fallback for values Arrow cannot dictionary-encode."""
    seen: dict[object, int] = {}
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        out[i] = seen.setdefault(_freeze(value), len(seen))
    return out


def _freeze(value: object) -> object:
    if isinstance(value, float) and value != value:
        return ("NaN",)  # NaN equals NaN, as in Arrow's own hashing
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value
