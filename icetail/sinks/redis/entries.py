"""A chunk's stream entries as columns: each field's values back to back, built with Arrow kernels.

The Lua script (script.py) takes a piece of a chunk as a few long arguments, one per field, and
cuts them into entries itself: a field's values are sent `\\n`-separated, or once when every entry
of the chunk has the same value (the table, mostly). Why: sent as one argument per field per entry
(15 an entry), redis-py's packing of the arguments was ~80% of the sink's time. No value holds a
raw `\\n`: the envelope and the key are JSON texts, the op a letter, the numbers digits; a table
name holding one is sent once, or refused when a chunk has several tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.records import record_key_values
from icetail.sinks.files.jsonl_encoding import encode_jsonl

SEPARATOR = b"\n"


@dataclass(frozen=True)
class Column:
    """One field of a chunk's entries: `one`, the value of every entry, or each entry's value in `text`,
    entry i's at text[offsets[i]:offsets[i + 1] - 1] (each value is followed by the separator)."""

    name: str
    one: bytes | None
    text: bytes = b""
    offsets: np.ndarray | None = None

    def values(self, start: int, stop: int) -> bytes:
        """The values of entries start..stop-1, separator-joined (the script's argument)."""
        if self.one is not None:
            return self.one
        assert self.offsets is not None
        return self.text[self.offsets[start] : self.offsets[stop] - 1]

    def value(self, i: int) -> bytes:
        return self.values(i, i + 1)


@dataclass(frozen=True)
class Entries:
    """A chunk's entries, in delivery order: entry i is record i of the chunk, at position
    `SPLIT:ROW:i` of the consumer's delivery; its fields are `columns` (op, table, snapshot_id,
    change_ordinal, then key with `key=`), `consumer`, `position` and `envelope`, in that order."""

    key: ChunkKey
    columns: tuple[Column, ...]
    envelope: Column
    count: int

    @property
    def envelope_sizes(self) -> np.ndarray:
        assert self.envelope.offsets is not None
        return np.diff(self.envelope.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        """Each entry's bytes in the script's arguments (its values of the per-entry fields, separators too)."""
        sizes = np.zeros(self.count, np.int64)
        for column in (*self.columns, self.envelope):
            if column.offsets is not None:
                sizes += np.diff(column.offsets)
        return sizes

    def fields(self, i: int) -> list[tuple[str, bytes]]:
        """Entry i's fields as the stream holds them (the bench's reference client sends these)."""
        key = self.key
        position = f"{key.batch_id}:{key.split_index}:{key.row_start_inclusive}:{i}".encode()
        named = [(c.name, c.value(i)) for c in self.columns]
        tail = [("consumer", key.consumer.encode()), ("position", position), ("envelope", self.envelope.value(i))]
        return [*named, *tail]


def entries(key: ChunkKey, records: pa.Table, key_columns: Sequence[str] = ()) -> Entries | None:
    """The entries of a chunk's envelope records (module docstring); None for no records."""
    if not records.num_rows:
        return None
    n = records.num_rows
    text = encode_jsonl(records)  # every line ends with the separator: the envelopes as they are sent
    ends = np.flatnonzero(np.frombuffer(text, np.uint8) == SEPARATOR[0]) + 1
    envelope = Column("envelope", None, text, np.concatenate([[0], ends]).astype(np.int64))
    source = records.column("source").combine_chunks()
    db, table = source.field("db"), source.field("table")
    named = pc.if_else(
        pc.fill_null(pc.not_equal(db, ""), False), pc.binary_join_element_wise(db, table, "."), table
    )
    values: list[tuple[str, pa.Array]] = [
        ("op", records.column("op").combine_chunks()),
        ("table", named),
        ("snapshot_id", _digits(source.field("snapshot_id"))),
        ("change_ordinal", _digits(source.field("change_ordinal"))),
    ]
    if key_columns:
        keys = record_key_values(records, key_columns, "Redis sink")
        values.append(("key", pa.array([json.dumps(k, default=str, ensure_ascii=False) for k in keys], pa.string())))
    return Entries(key, tuple(_column(name, v, n) for name, v in values), envelope, n)


def _digits(numbers: pa.Array) -> pa.Array:
    """As str() writes them (a null as None)."""
    return pc.fill_null(pc.cast(numbers, pa.string()), "None")


def _column(name: str, values: pa.Array, n: int) -> Column:
    if values.null_count:
        raise SinkRejectedError(f"Redis sink: a change record has no {name}; it cannot become a stream entry")
    if pc.count_distinct(values).as_py() == 1:
        return Column(name, values[0].as_py().encode())
    if pc.any(pc.match_substring(values, SEPARATOR.decode())).as_py():
        raise SinkRejectedError(
            f"Redis sink: a {name} with a line break in a chunk of several {name}s cannot be sent; rename it"
        )
    joined = pc.binary_join_element_wise(values, SEPARATOR.decode(), "")
    offsets = np.frombuffer(joined.buffers()[1], np.int32)[joined.offset : joined.offset + n + 1].astype(np.int64)
    data = joined.buffers()[2]
    text = data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()
    return Column(name, None, text, offsets - offsets[0])


def piece_bounds(sizes: np.ndarray, most_entries: int, most_bytes: int) -> Iterator[range]:
    """Entries cut in runs of at most `most_entries` and `most_bytes` (sizes[i]: entry i's bytes; a
    run of one may be larger), in order."""
    ends = np.cumsum(sizes, dtype=np.int64)
    start, n = 0, len(sizes)
    while start < n:
        before = int(ends[start - 1]) if start else 0
        stop = int(np.searchsorted(ends, before + most_bytes, side="right"))
        stop = min(max(stop, start + 1), start + most_entries, n)
        yield range(start, stop)
        start = stop
