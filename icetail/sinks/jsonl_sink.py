"""JSON lines: one object per change row, to a file or to stdout. At least once.

Values are encoded so that nothing is lost and every line is strict JSON:

* timestamps: ISO-8601 with the column's precision (`2026-01-02T03:04:05.123456`); columns with a
  time zone are written in UTC with a `+00:00` offset; dates `2026-01-02`; times `03:04:05.123456`
* decimals: strings (`"12.50"`), so no precision is lost to a float
* binary and fixed: base64 strings; UUIDs: the canonical `8-4-4-4-12` string
* NaN and infinities: the strings `"NaN"`, `"Infinity"`, `"-Infinity"`
* structs: objects; lists: arrays; maps: objects when the key type is a string, otherwise
  arrays of `{"key": ..., "value": ...}`; anything else JSON has no form for (durations): `str()`

A chunk is written with one `write`, then flushed (and fsynced for files). These sinks cannot
take back lines, so a chunk replayed after a crash between the sink write and the offset commit
is appended a second time: `exactly_once = False`. Consumers that need exactly once can drop
repeated chunks themselves, or use the parquet or iceberg sink.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, error_text
from icetail.sinks.base import ChunkKey
from icetail.sinks.parquet_sink import fsync_dir

Fixer = Callable[[Any], Any]


class JsonlFileSink:
    """Appends one JSON line per change row to a file; flush + fsync per chunk; at least once.

    On open, a torn last line (a crash in the middle of a chunk, which was then not committed
    and will be written again) is cut off, so the file holds whole lines only.
    """

    exactly_once: bool = False

    def __init__(self, path: str | os.PathLike[str], *, consumer: str) -> None:
        self.path = Path(os.path.abspath(path))
        self.consumer = consumer
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            existed = self.path.exists()
            self._file = open(self.path, "ab")  # held open until close()
            if not existed:
                fsync_dir(self.path.parent)
            self.torn_bytes_removed = _cut_torn_tail(self._file)
        except OSError as exc:
            raise ConfigError(f"jsonl sink file {str(self.path)!r} is not usable: {error_text(exc)}") from exc

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        if self._file.closed:
            raise SinkRejectedError(f"jsonl sink {str(self.path)!r} is closed")
        data = "".join(encode_lines(rows)).encode("utf-8")
        try:
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            where = str(self.path)
            raise SinkError(f"jsonl sink: appending chunk {key.name} to {where!r} failed: {error_text(exc)}") from exc
        return None

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class StdoutSink:
    """JSON lines to standard output (or `stream`), flushed per chunk; at least once."""

    exactly_once: bool = False

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._closed = False

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        if self._closed:
            raise SinkRejectedError("stdout sink is closed")
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.write("".join(encode_lines(rows)))
            stream.flush()
        except BrokenPipeError as exc:
            raise SinkRejectedError(f"stdout sink: the reader of stdout went away (chunk {key.name})") from exc
        except OSError as exc:
            raise SinkError(f"stdout sink: writing chunk {key.name} failed: {error_text(exc)}") from exc
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# -- encoding ------------------------------------------------------------------------------------


def encode_lines(rows: pa.Table | pa.RecordBatch) -> Iterator[str]:
    """One strict-JSON line (with its newline) per row, values encoded as the module doc says."""
    batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
    fixers = [_fixer(field.type) for field in rows.schema]
    for batch in batches:
        if batch.num_rows == 0:
            continue
        names = batch.schema.names
        columns = [_prepare(col).to_pylist() for col in batch.columns]
        for i, fix in enumerate(fixers):
            if fix is not None:
                columns[i] = [fix(v) for v in columns[i]]
        for values in zip(*columns, strict=True):
            row = dict(zip(names, values, strict=True))
            yield json.dumps(row, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str) + "\n"


def _prepare(arr: pa.Array) -> pa.Array:
    """`arr` with every leaf that JSON cannot hold as is turned into strings (recursively)."""
    t = arr.type
    if isinstance(t, pa.UuidType):
        return pa.array([None if b is None else str(uuid.UUID(bytes=b)) for b in arr.storage.to_pylist()], pa.string())
    if isinstance(t, pa.BaseExtensionType):
        return _prepare(arr.storage)
    if pa.types.is_dictionary(t):
        return _prepare(arr.dictionary_decode())
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S")
        text = pc.strftime(arr.cast(pa.timestamp(t.unit, "UTC")), format="%Y-%m-%dT%H:%M:%S")
        return pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
    if pa.types.is_time(t):
        return pc.strftime(arr, format="%H:%M:%S")
    if pa.types.is_date(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.array([_b64(b) for b in arr.to_pylist()], pa.string())
    if pa.types.is_struct(t):
        children = [_prepare(child) for child in arr.flatten()]
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=arr.is_null())
    if pa.types.is_map(t):
        # the same entries seen as list<struct<key, value>>; the fixer turns them into objects
        offsets = arr.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        keys, items = arr.keys.slice(start, end - start), arr.items.slice(start, end - start)
        entries = pa.StructArray.from_arrays([keys, items], names=["key", "value"])
        return _prepare(pa.ListArray.from_arrays(pc.subtract(offsets, start), entries, mask=arr.is_null()))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.LargeListArray.from_arrays(_offsets(arr), _prepare(arr.flatten()), mask=arr.is_null())
    return arr


def _offsets(arr: pa.Array) -> pa.Array:
    """Offsets of the list array `arr` as it is after `flatten()` (slicing and nulls dropped)."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
    return pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths)])


def _fixer(t: pa.DataType) -> Fixer | None:
    """A function finishing a `_prepare`d value of type `t` for JSON; None when none is needed."""
    if isinstance(t, pa.UuidType):
        return None
    if isinstance(t, pa.BaseExtensionType):
        return _fixer(t.storage_type)
    if pa.types.is_dictionary(t):
        return _fixer(t.value_type)
    if pa.types.is_floating(t):
        return _float
    if pa.types.is_struct(t):
        fields = [(f.name, _fixer(f.type)) for f in t]
        if all(fix is None for _, fix in fields):
            return None
        return lambda v: None if v is None else {n: _apply(fix, v[n]) for n, fix in fields}
    if pa.types.is_map(t):
        return _map_fixer(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _fixer(t.value_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    return None


def _map_fixer(t: pa.MapType) -> Fixer:
    key_fix, value_fix = _fixer(t.key_type), _fixer(t.item_type)
    string_keys = pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)

    def fix(v: Any) -> Any:
        if v is None:
            return None
        pairs = [(_apply(key_fix, e["key"]), _apply(value_fix, e["value"])) for e in v]
        if string_keys:
            return dict(pairs)
        return [{"key": k, "value": x} for k, x in pairs]

    return fix


def _apply(fix: Fixer | None, v: Any) -> Any:
    return v if fix is None else fix(v)


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _float(v: Any) -> Any:
    if v is None or math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def _cut_torn_tail(f: Any) -> int:
    """Truncate an append-mode binary file after its last newline; return the bytes removed."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return 0
    with open(f.name, "rb") as r:
        r.seek(size - 1)
        if r.read(1) == b"\n":
            return 0
        pos = size
        block = 64 * 1024
        while pos > 0:
            start = max(0, pos - block)
            r.seek(start)
            chunk = r.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        else:
            keep = 0
    f.truncate(keep)
    f.flush()
    os.fsync(f.fileno())
    return size - keep
