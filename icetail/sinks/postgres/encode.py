"""Rows as COPY input: CSV written by Arrow's C++ writer, after the few types it cannot write as
PostgreSQL reads them are turned into text here.

Arrow writes NULL as an empty field and every string quoted (an empty string as `""`), which is
how COPY's CSV format tells them apart. Binary and uuid columns become hex (`\\x...` for bytea,
32 hex digits for uuid), nested columns JSON text (for jsonb); the rest is written natively.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from icetail.sinks.postgres.types import JSONB, Column

BATCH_ROWS = 65_536  # rows per CSV piece: what is held encoded at once
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def copy_pieces(rows: pa.Table, columns: Sequence[Column], extra: Sequence[pa.Array] = ()) -> Iterator[bytes]:
    """CSV of `rows`' `columns` (then the `extra` arrays as more columns), in pieces of BATCH_ROWS rows."""
    arrays = [_writable(rows.column(c.name), c) for c in columns] + list(extra)
    names = [f"c{i}" for i in range(len(arrays))]
    table = pa.table(arrays, names=names)
    options = pacsv.WriteOptions(include_header=False)
    for start in range(0, table.num_rows, BATCH_ROWS):
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table.slice(start, BATCH_ROWS), sink, options)
        yield sink.getvalue().to_pybytes()


def _writable(column: pa.ChunkedArray, target: Column) -> pa.Array | pa.ChunkedArray:
    t = column.type
    if target.pg_type == JSONB:
        return pa.array([None if v is None else json.dumps(v, default=_json_default) for v in _py(column)], pa.string())
    if isinstance(t, pa.BaseExtensionType):
        column = pa.chunked_array([c.storage for c in column.chunks], t.storage_type)
        t = t.storage_type
    if target.pg_type == "uuid":
        return _hex(column, prefix=b"")
    if target.pg_type == "bytea":
        return _hex(column, prefix=b"\\x")
    return column


def _hex(column: pa.ChunkedArray, prefix: bytes) -> pa.Array:
    """Binary values as hex text; vectorized for fixed-size binary (uuid), per value otherwise."""
    array = column.combine_chunks()
    if not pa.types.is_fixed_size_binary(array.type):
        head = prefix.decode()
        return pa.array([None if v is None else head + v.hex() for v in array.to_pylist()], pa.string())
    n, width, lead = len(array), array.type.byte_width, len(prefix)
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * width : (array.offset + n) * width]
    grid = data.reshape(n, width)
    text = np.empty((n, lead + 2 * width), dtype=np.uint8)
    text[:, :lead] = np.frombuffer(prefix, dtype=np.uint8)
    text[:, lead::2] = _HEX[grid >> 4]
    text[:, lead + 1 :: 2] = _HEX[grid & 15]
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(lead + 2 * width), n, [None, pa.py_buffer(text.tobytes())])
    strings = fixed.cast(pa.binary()).cast(pa.string())
    return pc.if_else(array.is_null(), pa.scalar(None, pa.string()), strings) if array.null_count else strings


def _py(column: pa.ChunkedArray) -> list[Any]:
    return column.to_pylist()


def _json_default(value: Any) -> Any:
    """JSON for what json cannot write itself: decimals as numbers' text, times ISO, bytes hex."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date | datetime.time | datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
