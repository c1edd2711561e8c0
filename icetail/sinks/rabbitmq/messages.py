"""A chunk's envelope records as stream messages: AMQP 1.0 messages, as RabbitMQ's stream clients read them.

Each record (debezium.py: an update pair is one record) is one message: its body the envelope as one
strict-JSON object (the jsonl sink's encoding), `content_type` application/json, `subject` the table
(NS.TABLE), `message_id` the record's place in the consumer's stream
(`<consumer>:<snapshot id>:<change ordinal>:<batch id>:<split index>:<row>:<record>`, as the NATS sink's
Nats-Msg-Id), and application properties `Icetail-Op` (c, u, d, r), `Icetail-Table`,
`Icetail-Snapshot-Id`, `Icetail-Change-Ordinal` and, with `key=`, `Icetail-Key` (the key values as
a JSON array), all strings.

`amqp_message` writes one such message, byte for byte what rstream's `bytes(AMQPMessage(...))`
makes of it (a test compares the two; rstream's general encoder cost ~20x the rest of a chunk's
publish). The sink encodes a whole chunk at once with Arrow kernels (frames.py), to the same bytes
(a test compares them with this).
"""

from __future__ import annotations

import struct

PROPERTY_OP = "Icetail-Op"
PROPERTY_TABLE = "Icetail-Table"
PROPERTY_SNAPSHOT = "Icetail-Snapshot-Id"
PROPERTY_ORDINAL = "Icetail-Change-Ordinal"
PROPERTY_KEY = "Icetail-Key"
CONTENT_TYPE = "application/json"
_NULL = b"\x40"


def amqp_message(body: bytes, message_id: str, subject: str, application_properties: dict[str, str]) -> bytes:
    """The AMQP 1.0 message: properties (message_id, subject, content_type; the other 10 fields null),
    application properties (strings), one data section; rstream's encoding of the same AMQPMessage."""
    fields = b"".join(
        [_string(message_id), _NULL, _NULL, _string(subject), _NULL, _NULL, _CONTENT_TYPE, _NULL * 6]
    )
    pairs = b"".join(_string(k) + _string(v) for k, v in application_properties.items())
    return b"".join(
        [
            b"\x00\x53\x73",
            _compound(b"\xc0", b"\xd0", 13, fields),
            b"\x00\x53\x74",
            _compound(b"\xc1", b"\xd1", 2 * len(application_properties), pairs),
            b"\x00\x53\x75" + _variable(b"\xa0", b"\xb0", body) if body else b"",  # no data section when empty
        ]
    )


def _variable(small: bytes, large: bytes, value: bytes) -> bytes:
    """str8/str32, sym8/sym32, vbin8/vbin32: the one-byte length up to 255 octets."""
    n = len(value)
    return small + bytes((n,)) + value if n <= 255 else large + struct.pack(">L", n) + value


def _string(value: str) -> bytes:
    return _variable(b"\xa1", b"\xb1", value.encode("utf-8"))


def _compound(small: bytes, large: bytes, count: int, encoded: bytes) -> bytes:
    """list8/list32, map8/map32: the size counts the count's own bytes."""
    n = len(encoded)
    if count <= 255 and n < 255:
        return small + bytes((n + 1, count)) + encoded
    return large + struct.pack(">LL", n + 4, count) + encoded


_CONTENT_TYPE = _variable(b"\xa3", b"\xb3", CONTENT_TYPE.encode())  # a symbol

