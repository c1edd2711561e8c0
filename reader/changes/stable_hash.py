"""A row hash that is the same in every process and run, vectorized over Arrow buffers.

A shuffled reconciliation (reader/changes/shuffle.py) sends each change row to the partition its hash
names, in whatever Spark task reads it, and a resumed batch must cut the same partitions: so
the hash is a pure function of the values (Python's `hash()` is salted per process). Equal
values hash equal: floats are normalized (-0.0 is 0.0, every NaN one NaN), dictionaries are
decoded, nulls hash to one constant. Nested columns (struct, list, map) and types not handled
here are left out of the hash: hashing a subset of the columns keeps equal rows together,
which is all the partitioning needs. Changing this function changes where rows go: a batch
in flight across such a change would be cut differently (see PARTITION_HASH_VERSION).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARTITION_HASH_VERSION = 1  # bump with any change of the values below or of the algorithm

_U64 = np.uint64
_BYTE_MULTIPLIER = _U64(0x100000001B3)  # FNV-64 prime: the base of the per-byte polynomial
_COLUMN_MULTIPLIER = _U64(0x9E3779B97F4A7C15)
_NULL = _U64(0x6A09E667F3BCC909)
_LENGTH = _U64(0xC2B2AE3D27D4EB4F)


def hashable_columns(schema: pa.Schema, names: Sequence[str]) -> tuple[str, ...]:
    """`names` whose type this module hashes (nested columns are left out)."""
    return tuple(n for n in names if _handled(schema.field(n).type))


def partition_of(rows: pa.Table | pa.RecordBatch, columns: Sequence[str], partitions: int) -> np.ndarray:
    """The partition in [0, partitions) of every row, from a stable hash of `columns`."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if partitions == 1 or rows.num_rows == 0:
        return np.zeros(rows.num_rows, dtype=np.int64)
    return (row_hash(rows, columns) % _U64(partitions)).astype(np.int64)


def row_hash(rows: pa.Table | pa.RecordBatch, columns: Sequence[str]) -> np.ndarray:
    """A uint64 per row over `columns`; columns of unhandled types are skipped."""
    h = np.full(rows.num_rows, _U64(len(columns)), dtype=_U64)
    with np.errstate(over="ignore"):
        for name in columns:
            column = rows.column(name)
            array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            if not _handled(array.type):
                continue
            h = _mix(h * _COLUMN_MULTIPLIER + column_hash(array))
    return h


def column_hash(array: pa.Array) -> np.ndarray:
    """A uint64 per value; equal values (NULL equal to NULL) give equal hashes."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    n = len(array)
    kind = array.type
    with np.errstate(over="ignore", invalid="ignore"):
        if pa.types.is_null(kind):
            return np.full(n, _NULL, dtype=_U64)
        if pa.types.is_boolean(kind):
            values = np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=_U64)
        elif pa.types.is_floating(kind):
            values = _float_bits(pc.fill_null(array, 0).to_numpy(zero_copy_only=False))
        elif _is_var_width(kind):
            values = _bytes_hash(array)
        elif pa.types.is_fixed_size_binary(kind) or pa.types.is_decimal(kind):
            values = _fixed_bytes_hash(array, kind.byte_width)
        else:  # integers, dates, times, timestamps, durations: their little-endian value
            width = kind.bit_width // 8
            raw = np.frombuffer(array.buffers()[1], dtype=f"<u{width}")
            values = raw[array.offset : array.offset + n].astype(_U64)
        hashed = _mix(values)
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        hashed = np.where(valid, hashed, _NULL)
    return hashed


def _handled(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _handled(kind.value_type)
    if pa.types.is_null(kind) or pa.types.is_boolean(kind) or pa.types.is_floating(kind):
        return True
    if _is_var_width(kind) or pa.types.is_fixed_size_binary(kind) or pa.types.is_decimal(kind):
        return True
    return (
        pa.types.is_integer(kind) or pa.types.is_temporal(kind)  # dates, times, timestamps, durations
    ) and kind.bit_width in (8, 16, 32, 64)


def _is_var_width(kind: pa.DataType) -> bool:
    return (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    )


def _float_bits(values: np.ndarray) -> np.ndarray:
    wide = values.astype(np.float64) + 0.0  # -0.0 + 0.0 is 0.0
    wide[np.isnan(wide)] = np.nan  # one NaN bit pattern
    return wide.view(_U64)


def _powers(count: int) -> np.ndarray:
    """_BYTE_MULTIPLIER ** k for k in [0, count), modulo 2**64."""
    powers = np.full(max(count, 1), _BYTE_MULTIPLIER, dtype=_U64)
    powers[0] = _U64(1)
    return np.cumprod(powers, dtype=_U64)


def _bytes_hash(array: pa.Array) -> np.ndarray:
    """Polynomial hash of each value's bytes (np.add.reduceat over the data buffer), with its length."""
    n = len(array)
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype="<i8" if wide else "<i4")[array.offset : array.offset + n + 1]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    first = int(offsets[0]) if n else 0
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.empty(0, np.uint8)
    data = data[first : int(offsets[-1]) if n else 0]
    sums = np.zeros(n, dtype=_U64)
    nonempty = lengths > 0
    if len(data):
        starts = offsets[:-1] - first
        position = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
        terms = (data.astype(_U64) + _U64(1)) * _powers(int(lengths.max()))[position]
        sums[nonempty] = np.add.reduceat(terms, starts[nonempty])
    return sums ^ (lengths.astype(_U64) * _LENGTH)


def _fixed_bytes_hash(array: pa.Array, width: int) -> np.ndarray:
    n = len(array)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * width : (array.offset + n) * width]
    terms = (raw.reshape(n, width).astype(_U64) + _U64(1)) * _powers(width)
    return np.asarray(terms.sum(axis=1, dtype=_U64), dtype=_U64)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    h = h ^ (h >> _U64(30))
    h = h * _U64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> _U64(27))
    h = h * _U64(0x94D049BB133111EB)
    return np.asarray(h ^ (h >> _U64(31)), dtype=_U64)
