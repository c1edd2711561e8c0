"""JSON lines from Arrow, column by column: one strict-JSON object per change row.

Values are encoded so that nothing is lost and every line is strict JSON:

* timestamps: ISO-8601 with the column's precision (`2026-01-02T03:04:05.123456`); columns with a
  time zone are written in UTC with a `+00:00` offset; dates `2026-01-02`; times `03:04:05.123456`
* decimals: strings (`"12.50"`), so no precision is lost to a float
* binary and fixed: base64 strings; UUIDs: the canonical `8-4-4-4-12` string
* floats: as Python's `repr` writes them (`1.0`, `0.1`, `1e+16`, `1e-05`); a float32 as the
  double it widens to (`0.10000000149011612`); NaN and infinities: the strings `"NaN"`,
  `"Infinity"`, `"-Infinity"`
* strings: as `json.dumps(..., ensure_ascii=False)` writes them (`"`, `\\`, and control
  characters escaped, everything else as UTF-8)
* structs: objects; lists: arrays; maps: objects when the key type is a string, otherwise
  arrays of `{"key": ..., "value": ...}`; anything else JSON has no form for (durations): `str()`

Why column by column: the encoder that defined this format (kept as the test oracle in
tests/support/jsonl_reference.py, the bytes pinned by tests/sinks/test_jsonl_encoding.py) built a
Python dict per row and called `json.dumps`, ~20 us a row, 50x a parquet decode. Here every
column becomes an Arrow string array of JSON texts with Arrow kernels, and one kernel joins
them into lines. Python touches single values only where Arrow's text differs from Python's:
floats outside [1e-4, 1e16) or not finite, strings that need escaping, binary (base64), UUIDs,
and types with no kernel (durations). A column with one value on every row of a slice (the
metadata columns of a change chunk: one change type, one commit) is encoded once and its text
shared by every line; in a change row it was ~30% of the encoding's time.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SLICE_ROWS = 65_536  # rows per encoded buffer: bounds the memory of one step, and int32 text offsets
ENCODER_THREADS = max(1, min(4, os.cpu_count() or 1))  # slices encoded at once (the kernels release the GIL)

_NULL = pa.scalar("null", pa.string())
_EMPTY = pa.scalar("", pa.string())
_MAX_TEXT_BYTES = 2**31 - 1  # int32 offsets of a string array
_FOUR_DIGIT_YEARS = (-62_135_596_800, 253_402_300_800)  # seconds: 0001-01-01 inclusive, 10000-01-01 exclusive
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'  # what json.dumps(ensure_ascii=False) escapes


def encode_jsonl(rows: pa.Table | pa.RecordBatch) -> bytes:
    """Every row of `rows` as one JSON line with its newline, UTF-8."""
    return b"".join(buffer.to_pybytes() for buffer in jsonl_buffers(rows))


def jsonl_buffers(
    rows: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch], *, threads: int = ENCODER_THREADS
) -> Iterator[pa.Buffer]:
    """The lines of `rows` (one table or batch, or several in order) in order, as UTF-8 buffers of
    whole lines (at most SLICE_ROWS each).

    Why threads: the encoding is Arrow kernels that release the GIL, so `threads` slices are
    encoded at once (measured: 1M change rows 0.57 s on one thread, 0.29 s on two), at most
    `threads + 1` slices ahead of the one being written, so memory stays bounded.
    """
    slices: Iterator[pa.RecordBatch] = (
        batch.slice(start, SLICE_ROWS)
        for part in _parts(rows)
        for batch in (part.to_batches() if isinstance(part, pa.Table) else [part])
        for start in range(0, batch.num_rows, SLICE_ROWS)
    )
    first_two = list(itertools.islice(slices, 2))
    slices = itertools.chain(first_two, slices)
    if threads <= 1 or len(first_two) < 2:  # one slice (a small chunk): no threads to start
        for batch in slices:
            yield from _encode_slice(batch)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="icetail-jsonl") as pool:
        ahead: deque[Future[list[pa.Buffer]]] = deque()
        try:
            for batch in slices:
                ahead.append(pool.submit(_encoded_slice, batch))
                while ahead and (len(ahead) > threads or ahead[0].done()):  # what is ready goes out
                    yield from ahead.popleft().result()
            while ahead:
                yield from ahead.popleft().result()
        finally:  # abandoned or failed: do not encode what nobody will write
            for future in ahead:
                future.cancel()


def write_jsonl_to(stream: IO[str], rows: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch]) -> int:
    """Write the lines of `rows` (or of several tables or batches, in order) to the text stream
    `stream`, flushing it after every buffer; returns the row count.

    The bytes go to the stream's binary buffer when it has one (stdout, files), so nothing is
    decoded and encoded again.
    """
    count = 0

    def counted() -> Iterator[pa.Table | pa.RecordBatch]:
        nonlocal count
        for part in _parts(rows):
            count += part.num_rows
            yield part

    binary = getattr(stream, "buffer", None)
    if binary is not None:
        stream.flush()
        for buffer in jsonl_buffers(counted()):
            binary.write(buffer)
            binary.flush()  # a reader of a pipe sees whole lines as they come
    else:
        for buffer in jsonl_buffers(counted()):
            stream.write(buffer.to_pybytes().decode("utf-8"))
    stream.flush()
    return count


def _parts(
    rows: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch],
) -> Iterable[pa.Table | pa.RecordBatch]:
    """One table or batch as a sequence of one, or the given ones."""
    return [rows] if isinstance(rows, pa.Table | pa.RecordBatch) else rows


def _encoded_slice(batch: pa.RecordBatch) -> list[pa.Buffer]:
    return list(_encode_slice(batch))


def _encode_slice(batch: pa.RecordBatch) -> Iterator[pa.Buffer]:
    try:
        lines = _object_texts(batch.schema.names, batch.columns, batch.num_rows, close="}\n")
    except (pa.ArrowCapacityError, pa.ArrowInvalid, OverflowError):
        # more than 2 GiB of text in one slice: halve it (a single row is encoded or fails)
        if batch.num_rows <= 1:
            raise
        half = batch.num_rows // 2
        yield from _encode_slice(batch.slice(0, half))
        yield from _encode_slice(batch.slice(half))
        return
    yield _text_buffer(lines)


def _text_buffer(texts: pa.Array) -> pa.Buffer:
    """The UTF-8 bytes of a string array, all values back to back (no copy; a null's bytes, if any, too)."""
    data = texts.buffers()[2]
    if data is None or len(texts) == 0:
        return pa.py_buffer(b"")
    offsets = memoryview(texts.buffers()[1]).cast("i")  # int32, little-endian as Arrow's
    first, last = offsets[texts.offset], offsets[texts.offset + len(texts)]
    return data.slice(first, last - first)


def _object_texts(names: list[str], columns: list[pa.Array], rows: int, *, close: str) -> pa.Array:
    """`{"name":value,...}` + the tail of `close` per row, from the JSON texts of each column.

    A column with one value on every row (the change metadata of a chunk: one change type, one
    commit) is encoded once, and its text joins the keys around it as one shared text; the quotes
    of a quoted column without nulls are shared texts too (one pass over its text less).
    """
    if not names:
        return _repeated_text(close.replace("}", "{}", 1), rows)
    parts: list[str | pa.Array] = []  # a str: text every row shares
    for i, (name, column) in enumerate(zip(names, columns, strict=True)):
        parts.append(("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":")
        shared = _shared_text(column)
        parts.extend([shared] if shared is not None else _text_parts(column))
    parts.append(close)
    merged: list[str | pa.Array] = []
    for part in parts:  # adjacent shared texts as one: fewer, longer arguments to the join
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    if len(merged) == 1:  # every column shared: the same line on every row
        return _repeated_text(str(merged[0]), rows)
    args = [pa.scalar(p, pa.string()) if isinstance(p, str) else p for p in merged]
    return pc.binary_join_element_wise(*args, _EMPTY)


def _repeated_text(text: str, rows: int) -> pa.Array:
    """`text` on each of `rows` rows (pa.repeat overflows int32 offsets silently: refused here)."""
    if len(text.encode("utf-8")) * rows > _MAX_TEXT_BYTES:
        raise pa.ArrowCapacityError(f"{rows} rows of {len(text)} characters exceed one string array")
    return pa.repeat(pa.scalar(text, pa.string()), rows)


def _shared_text(column: pa.Array | pa.ChunkedArray) -> str | None:
    """The JSON text of the one value on every row of `column`, or None if it has several (or one row).

    Checked only for types whose equal values have equal texts (not floats: 0.0 == -0.0), and
    first against the last row, so a column of varied values costs two scalars.
    """
    count = len(column)
    if count < 2 or not isinstance(column, pa.Array):
        return None
    if column.null_count == count:
        return "null"
    if column.null_count or not _equal_means_same_text(column.type):
        return None
    first = column[0]
    if first != column[count - 1] or not pc.all(pc.equal(column, first)).as_py():
        return None
    text: str = _json_texts(column.slice(0, 1))[0].as_py()
    return text


def _equal_means_same_text(t: pa.DataType) -> bool:
    return not isinstance(t, pa.BaseExtensionType) and (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _text_parts(column: pa.Array | pa.ChunkedArray) -> list[str | pa.Array]:
    """The JSON texts of `column` as parts of a row join: `"`, the texts between the quotes, and
    the closing quote for quoted types without nulls (a null is `null`, unquoted), else the texts."""
    if isinstance(column, pa.Array) and column.null_count == 0:
        t = column.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            text = column.cast(pa.string())
            needs = _needs_escape(text)
            return ['"', text, '"'] if needs is None else [_escaped(text, needs)]
        unquoted = _unquoted_texts(column)
        if unquoted is not None:
            return ['"', *unquoted]
    return [_json_texts(column)]


def _json_texts(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string array with the JSON text of every value of `arr` (`null` for nulls), never null."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    text = _value_texts(arr)
    if arr.null_count == 0 and text.null_count == 0:
        return text
    if text.null_count == arr.null_count:  # the kernels kept the nulls where they were
        return pc.fill_null(text, _NULL)
    return pc.if_else(arr.is_null(), _NULL, pc.fill_null(text, _NULL))


def _value_texts(arr: pa.Array) -> pa.Array:
    """The JSON text of each value of `arr`; a null value may give null or any text."""
    t = arr.type
    if isinstance(t, pa.UuidType):
        return _quoted(_per_value(arr.storage, lambda b: str(uuid.UUID(bytes=b))))
    if isinstance(t, pa.BaseExtensionType):
        return _value_texts(arr.storage)
    if pa.types.is_dictionary(t):
        return pc.take(_json_texts(arr.dictionary), arr.indices)
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, pa.scalar("true", pa.string()), pa.scalar("false", pa.string()))
    if pa.types.is_integer(t):
        return arr.cast(pa.string())
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return _float_texts(arr.cast(pa.float64()))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string_texts(arr.cast(pa.string()))
    unquoted = _unquoted_texts(arr)
    if unquoted is not None:
        return pc.binary_join_element_wise('"', *unquoted, _EMPTY)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _quoted(_per_value(arr, lambda b: base64.b64encode(b).decode("ascii")))
    if pa.types.is_struct(t):
        return _object_texts([f.name for f in t], arr.flatten(), len(arr), close="}")
    if pa.types.is_map(t):
        return _map_texts(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        joined = pc.binary_join(_as_list(arr, _json_texts(arr.flatten())), ",")
        return pc.binary_join_element_wise("[", joined, "]", _EMPTY)
    return _per_value_json(arr)


def _unquoted_texts(arr: pa.Array) -> tuple[pa.Array, str] | None:
    """Timestamps, times, dates and decimals: the text inside the quotes, and what closes it."""
    t = arr.type
    if pa.types.is_timestamp(t):
        return _timestamp_texts(arr), '"' if t.tz is None else '+00:00"'
    if pa.types.is_time(t) or pa.types.is_date(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string()), '"'
    return None


def _timestamp_texts(arr: pa.Array) -> pa.Array:
    """ISO-8601 texts in UTC, without the quotes.

    Arrow's cast writes `YYYY-MM-DD hh:mm:ss[.fraction of the unit]` in UTC (what strftime wrote,
    20x faster): the space becomes the ISO `T`. With four-digit years it is the 11th byte of
    every text, replaced in place (4x faster than looking for it); other years move it.
    """
    unit = arr.type.unit
    text = arr.cast(pa.timestamp(unit)).cast(pa.string())
    low, high = pc.min_max(arr.view(pa.int64())).values()
    per_second = _PER_SECOND[unit]
    if (
        low.is_valid
        and _FOUR_DIGIT_YEARS[0] * per_second <= low.as_py() <= high.as_py() < _FOUR_DIGIT_YEARS[1] * per_second
    ):
        return pc.binary_replace_slice(text, 10, 11, "T")
    return pc.replace_substring(text, " ", "T", max_replacements=1)


def _as_list(arr: pa.Array, values: pa.Array) -> pa.Array:
    """`values` (one per element of the list array `arr` after `flatten()`) regrouped as `arr` groups them."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
    offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths)])
    return pa.LargeListArray.from_arrays(offsets, values)


def _map_texts(arr: pa.MapArray) -> pa.Array:
    """Objects when the keys are strings, else arrays of {"key":..,"value":..}, in entry order."""
    t = arr.type
    offsets = arr.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    keys = _json_texts(arr.keys.slice(start, end - start))
    items = _json_texts(arr.items.slice(start, end - start))
    if pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type):
        entries = pc.binary_join_element_wise(keys, ":", items, _EMPTY)
        opening, closing = "{", "}"
    else:
        entries = pc.binary_join_element_wise('{"key":', keys, ',"value":', items, "}", _EMPTY)
        opening, closing = "[", "]"
    grouped = pa.LargeListArray.from_arrays(pc.subtract(offsets, start).cast(pa.int64()), entries)
    return pc.binary_join_element_wise(opening, pc.binary_join(grouped, ","), closing, _EMPTY)


def _float_texts(arr: pa.Array) -> pa.Array:
    """Doubles as Python's repr: Arrow's shortest text where it agrees (plus `.0`), repr elsewhere.

    Both are shortest round-trip texts with the same digits; they differ in notation: Python
    writes fixed notation exactly for 1e-4 <= |x| < 1e16 (and 0), with `.0` on integral values.
    """
    text = arr.cast(pa.string())
    magnitude = pc.abs(arr)
    python_fixed = pc.or_(pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e16)), pc.equal(arr, 0.0))
    same = pc.and_(python_fixed, pc.invert(pc.match_substring(text, "e")))
    same = pc.fill_null(same, True)  # nulls stay null
    # in fixed notation an integral value is written without a point: Python adds `.0`
    integral = pc.fill_null(pc.and_(same, pc.equal(pc.floor(arr), arr)), False)
    if pc.any(integral).as_py():
        pointed = pc.binary_join_element_wise(text.filter(integral), ".0", _EMPTY)
        text = pc.replace_with_mask(text, integral, pointed)
    if pc.all(same).as_py():
        return text
    others = pc.invert(same)
    fixed = [json.dumps(_finite_or_name(v)) for v in arr.filter(others).to_pylist()]
    return pc.replace_with_mask(text, others, pa.array(fixed, pa.string()))


def _string_texts(arr: pa.Array) -> pa.Array:
    """Quoted strings; the few that need escapes go through json.dumps itself."""
    needs = _needs_escape(arr)
    return _quoted(arr) if needs is None else _escaped(arr, needs)


def _needs_escape(arr: pa.Array) -> pa.Array | None:
    """Which strings json.dumps would escape; None if none would.

    All the text bytes are looked at at once first: most columns have no byte to escape, and that
    answer costs a twentieth of a regex per value.
    """
    if not _has_escape_byte(arr):
        return None
    needs = pc.fill_null(pc.match_substring_regex(arr, _NEEDS_ESCAPE), False)
    return needs if pc.any(needs).as_py() else None


def _has_escape_byte(arr: pa.Array) -> bool:
    """Whether the text bytes of the string array `arr` hold a control character, `"` or `\\`.

    Exact for UTF-8 (no byte of a multi-byte character is below 0x80); a null's bytes, if it has
    any, count too, which only costs the per-value regex.
    """
    data = np.frombuffer(_text_buffer(arr), dtype=np.uint8)
    return bool(data.size) and bool(data.min() < 0x20 or (data == 0x22).any() or (data == 0x5C).any())


def _escaped(arr: pa.Array, needs: pa.Array) -> pa.Array:
    """Quoted strings, those marked in `needs` as json.dumps writes them."""
    escaped = [json.dumps(v, ensure_ascii=False) for v in arr.filter(needs).to_pylist()]
    return pc.replace_with_mask(_quoted(arr), needs, pa.array(escaped, pa.string()))


def _quoted(arr: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', arr, '"', _EMPTY)


def _per_value(arr: pa.Array, to_text: Any) -> pa.Array:
    return pa.array([None if v is None else to_text(v) for v in arr.to_pylist()], pa.string())


def _per_value_json(arr: pa.Array) -> pa.Array:
    """Types with no kernel here: each value as json.dumps writes its Python value (`str()` if none)."""
    floating = pa.types.is_floating(arr.type)

    def encode(v: Any) -> str:
        return json.dumps(
            _finite_or_name(v) if floating else v,
            ensure_ascii=False,
            allow_nan=False,
            separators=(",", ":"),
            default=str,
        )

    return pa.array([None if v is None else encode(v) for v in arr.to_pylist()], pa.string())


def _finite_or_name(v: Any) -> Any:
    if v is None or math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"
