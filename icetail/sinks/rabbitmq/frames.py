"""A chunk's stream messages encoded with Arrow kernels, as the Publish frames carry them.

messages.py says what a message holds and writes one (`amqp_message`, the reference). Here the
whole chunk is encoded at once: each part of the AMQP 1.0 message (constant bytes, a string's
length prefix, the string) is a column, and one kernel joins the columns into each message,
preceded by what a Publish frame puts before a message (its publishing id, its length). A frame
is then a header and one slice of the part's bytes. Why: built in Python per message (~10 us a
message), the encoding was most of the sink's time; rstream's own publish encoding is also a
Python loop per message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.records import record_key_values
from icetail.sinks.files.jsonl_encoding import encode_jsonl
from icetail.sinks.rabbitmq.ids import first_publishing_id
from icetail.sinks.rabbitmq.messages import (
    CONTENT_TYPE,
    PROPERTY_KEY,
    PROPERTY_OP,
    PROPERTY_ORDINAL,
    PROPERTY_SNAPSHOT,
    PROPERTY_TABLE,
)

PART_RECORDS = 16_384  # records encoded at once (a part publishes while the next one is encoded)
PUBLISH_KEY = 2  # the stream protocol's Publish command
PUBLISH_VERSION = 1
MESSAGE_OVERHEAD = 12  # per message in a frame: publishing id and data length
PUBLISH_FRAME_OVERHEAD = 13  # a Publish frame: length, key, version, publisher id, message count
_BIN = pa.binary()


@dataclass(frozen=True)
class Part:
    """Messages `first_id`..`first_id + count - 1` of a chunk: message i as a Publish frame carries it
    (publishing id, length, AMQP message) is data[offsets[i]:offsets[i + 1]]."""

    first_id: int
    data: pa.Buffer
    offsets: np.ndarray
    message_ids: pa.Array

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    @property
    def last_id(self) -> int:
        return self.first_id + self.count - 1

    @property
    def largest(self) -> int:
        """The index of the part's largest message."""
        return int(np.argmax(np.diff(self.offsets)))

    def size(self, i: int) -> int:
        """Message i's AMQP size in bytes."""
        return int(self.offsets[i + 1] - self.offsets[i]) - MESSAGE_OVERHEAD

    def message(self, i: int) -> bytes:
        """Message i's AMQP encoding (what a consumer reads)."""
        start = int(self.offsets[i]) + MESSAGE_OVERHEAD
        return self.data.slice(start, int(self.offsets[i + 1]) - start).to_pybytes()

    def frames(self, start: int, frame_max: int, most: int) -> Iterator[tuple[int, int]]:
        """Messages start.. cut into frames of at most `frame_max` bytes and `most` messages: (first, stop)
        index pairs (a frame of one message may be larger: the sink refuses such a message first)."""
        ends = self.offsets[1:]
        n = self.count
        while start < n:
            room = int(self.offsets[start]) + frame_max - PUBLISH_FRAME_OVERHEAD
            stop = int(np.searchsorted(ends, room, side="right"))
            stop = min(max(stop, start + 1), start + most, n)
            yield start, stop
            start = stop

    def frame(self, publisher_id: int, start: int, stop: int) -> bytes:
        """The Publish frame of messages start..stop-1: rstream's encode_publish of the same messages."""
        body = memoryview(self.data)[int(self.offsets[start]) : int(self.offsets[stop])]
        head = (
            (len(body) + PUBLISH_FRAME_OVERHEAD - 4).to_bytes(4, "big")
            + PUBLISH_KEY.to_bytes(2, "big")
            + PUBLISH_VERSION.to_bytes(2, "big")
            + bytes((publisher_id,))
            + (stop - start).to_bytes(4, "big")
        )
        return b"".join((head, body))


def encoded_parts(key: ChunkKey, records: pa.Table, key_columns: Sequence[str] = ()) -> Iterator[Part]:
    """The chunk's messages (messages.py) in parts of at most PART_RECORDS records, in order; each part
    is encoded when it is asked for (the sink sends a part while the next one is encoded)."""
    if not records.num_rows:
        return
    first_id = first_publishing_id(key, records.num_rows)
    for start in range(0, records.num_rows, PART_RECORDS):
        yield from _parts(key, records.slice(start, PART_RECORDS), start, first_id + start, key_columns)


def _parts(key: ChunkKey, records: pa.Table, start: int, first_id: int, key_columns: Sequence[str]) -> Iterator[Part]:
    try:
        part = _encoded(key, records, start, first_id, key_columns)
    except (pa.ArrowCapacityError, OverflowError):  # over the 2 GiB of one binary array: halved
        if records.num_rows <= 1:
            raise
        half = records.num_rows // 2
        yield from _parts(key, records.slice(0, half), start, first_id, key_columns)
        yield from _parts(key, records.slice(half), start + half, first_id + half, key_columns)
        return
    yield part


def _encoded(key: ChunkKey, records: pa.Table, start: int, first_id: int, key_columns: Sequence[str]) -> Part:
    n = records.num_rows
    text = encode_jsonl(records)
    ends = np.flatnonzero(np.frombuffer(text, np.uint8) == 10) + 1
    if ends[-1] > np.iinfo(np.int32).max:
        raise pa.ArrowCapacityError(f"{n} envelopes of {ends[-1]} bytes exceed one binary array")
    offsets = np.concatenate([[0], ends]).astype(np.int32)
    lines = pa.Array.from_buffers(_BIN, n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
    body = pc.binary_slice(lines, 0, -1)  # the envelope, less its line's end
    source = records.column("source").combine_chunks()
    db, table = source.field("db"), source.field("table")
    subject = pc.if_else(pc.fill_null(pc.not_equal(db, ""), False), pc.binary_join_element_wise(db, table, "."), table)
    snapshot = pc.fill_null(pc.cast(source.field("snapshot_id"), pa.string()), "None")
    ordinal = pc.fill_null(pc.cast(source.field("change_ordinal"), pa.string()), "None")
    place = f":{key.batch_id}:{key.split_index}:{key.row_start_inclusive}:"
    index = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
    message_id = pc.binary_join_element_wise(f"{key.consumer}:", snapshot, ":", ordinal, place, index, "")
    properties = [
        (PROPERTY_OP, records.column("op").combine_chunks()),
        (PROPERTY_TABLE, subject),
        (PROPERTY_SNAPSHOT, snapshot),
        (PROPERTY_ORDINAL, ordinal),
    ]
    if key_columns:
        keys = record_key_values(records, key_columns, "RabbitMQ stream sink")
        properties.append((PROPERTY_KEY, pa.array([json.dumps(k, default=str) for k in keys], pa.string())))

    # the message: properties (a list of 13), application properties (a map), the data section
    mid, mid_size = _strings(message_id)
    subject_parts, subject_size = _strings(subject)
    tail = b"\x40\x40" + _constant_string(CONTENT_TYPE, b"\xa3") + b"\x40" * 6
    fields_size = mid_size + 2 + subject_size + len(tail)
    pairs: list[pa.Array | bytes] = []
    pairs_size = np.zeros(n, np.int64)
    for name, values in properties:
        value_parts, size = _strings(values)
        pairs += [_constant_string(name, b"\xa1"), *value_parts]
        pairs_size += len(_constant_string(name, b"\xa1")) + size
    fields_head = _compound_heads(fields_size, 13, b"\x00\x53\x73", b"\xc0", b"\xd0")
    pairs_head = _compound_heads(pairs_size, 2 * len(properties), b"\x00\x53\x74", b"\xc1", b"\xd1")
    body_size = np.asarray(pc.binary_length(body), np.int64)
    body_head = _rows(
        n,
        [
            (body_size == 0, np.zeros((n, 0), np.uint8)),  # no data section when empty
            ((body_size >= 1) & (body_size <= 255), _stack(b"\x00\x53\x75\xa0", body_size[:, None])),
            (body_size > 255, _stack(b"\x00\x53\x75\xb0", _be32(body_size))),
        ],
    )
    size = (
        _lengths(fields_head) + fields_size + _lengths(pairs_head) + pairs_size + _lengths(body_head) + body_size
    )
    frame_head = _rows(n, [(np.ones(n, bool), np.hstack([_be64(first_id + np.arange(n)), _be32(size)]))])
    columns: list[pa.Array | bytes] = [
        frame_head, fields_head, *mid, b"\x40\x40", *subject_parts, tail, pairs_head, *pairs, body_head, body,
    ]  # fmt: skip
    merged: list[pa.Array | bytes] = []
    for column in columns:  # adjacent constants as one: fewer, longer arguments to the join
        if isinstance(column, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += column
        else:
            merged.append(column)
    joined = pc.binary_join_element_wise(*[_scalar(c) for c in merged], pa.scalar(b"", _BIN))
    out = np.frombuffer(joined.buffers()[1], np.int32)[joined.offset : joined.offset + n + 1].astype(np.int64)
    data = joined.buffers()[2].slice(int(out[0]), int(out[-1] - out[0]))
    return Part(first_id, data, out - out[0], message_id)


def _scalar(column: pa.Array | bytes) -> pa.Array | pa.Scalar:
    return pa.scalar(column, _BIN) if isinstance(column, bytes) else column


def _constant_string(text: str, small: bytes) -> bytes:
    """A str8 (a1) or sym8 (a3) of a short constant."""
    encoded = text.encode()
    assert len(encoded) <= 255
    return small + bytes((len(encoded),)) + encoded


def _strings(values: pa.Array) -> tuple[list[pa.Array | bytes], np.ndarray]:
    """The str8/str32 encoding of each string: its head and the string as columns, or one constant when
    every record has the same string (the table, the snapshot: encoded once); and each one's size."""
    if len(values) > 1 and not values.null_count and pc.count_distinct(values).as_py() == 1:
        one = values[0].as_py().encode()
        head = b"\xa1" + bytes((len(one),)) if len(one) <= 255 else b"\xb1" + len(one).to_bytes(4, "big")
        return [head + one], np.full(len(values), len(head) + len(one), np.int64)
    heads, sizes = _string_heads(values)
    return [heads, pc.cast(values, _BIN)], sizes


def _string_heads(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Each string's str8/str32 head (code and length), and the encoded string's whole size."""
    lengths = np.asarray(pc.binary_length(values), np.int64)
    short = lengths <= 255
    heads = _rows(
        len(values),
        [(short, _stack(b"\xa1", lengths[:, None])), (~short, _stack(b"\xb1", _be32(lengths)))],
    )
    return heads, lengths + np.where(short, 2, 5)


def _compound_heads(sizes: np.ndarray, count: int, descriptor: bytes, small: bytes, large: bytes) -> pa.Array:
    """The described list8/list32 (c0/d0) or map8/map32 (c1/d1) heads of `count` items of `sizes` bytes: the
    size counts the count's own bytes (messages.amqp_message)."""
    n = len(sizes)
    short = np.full(n, count <= 255) & (sizes < 255)
    counts = np.full((n, 1), count)
    return _rows(
        n,
        [
            (short, _stack(descriptor + small, sizes[:, None] + 1, counts)),
            (~short, _stack(descriptor + large, _be32(sizes + 4), _be32(counts[:, 0]))),
        ],
    )


def _stack(constant: bytes, *columns: np.ndarray) -> np.ndarray:
    """Rows of `constant` then the byte columns (each value < 256)."""
    n = len(columns[0])
    fixed = np.broadcast_to(np.frombuffer(constant, np.uint8), (n, len(constant)))
    return np.hstack([fixed, *[np.asarray(c).astype(np.uint8) for c in columns]])


def _be32(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(">u4").view(np.uint8).reshape(-1, 4)


def _be64(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(">u8").view(np.uint8).reshape(-1, 8)


def _lengths(heads: pa.Array) -> np.ndarray:
    return np.asarray(pc.binary_length(heads), np.int64)


def _rows(n: int, forms: list[tuple[np.ndarray, np.ndarray]]) -> pa.Array:
    """A binary array of n rows: row i is the row of the form whose mask holds i (masks do not overlap)."""
    whole = [rows for mask, rows in forms if mask.all()]
    if whole:  # one form for every row: its bytes as they lie
        width = whole[0].shape[1]
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
        data = np.ascontiguousarray(whole[0], np.uint8)
        return pa.Array.from_buffers(_BIN, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    sizes = np.zeros(n, np.int64)
    for mask, rows in forms:
        sizes[mask] = rows.shape[1]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = np.zeros(int(offsets[-1]), np.uint8)
    for mask, rows in forms:
        chosen = np.flatnonzero(mask)
        if len(chosen) and rows.shape[1]:
            at = offsets[chosen][:, None] + np.arange(rows.shape[1])
            data[at.ravel()] = rows[chosen].ravel()
    return pa.Array.from_buffers(_BIN, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
