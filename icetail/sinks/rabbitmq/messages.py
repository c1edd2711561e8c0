"""A chunk's envelope records as stream messages: AMQP 1.0 messages, as RabbitMQ's stream clients read them.

Each record (debezium.py: an update pair is one record) is one message: its body the envelope as one
strict-JSON object (the jsonl sink's encoding), `content_type` application/json, `subject` the table
(NS.TABLE), `message_id` the record's place in the consumer's stream
(`<consumer>:<snapshot id>:<change ordinal>:<batch id>:<split index>:<row>`, as the NATS sink's
Nats-Msg-Id), and application properties `Icetail-Op` (c, u, d, r), `Icetail-Table`,
`Icetail-Snapshot-Id`, `Icetail-Change-Ordinal` and, with `key=`, `Icetail-Key` (the key values as
a JSON array), all strings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.records import record_key_values
from icetail.sinks.files.jsonl_encoding import encode_jsonl
from icetail.sinks.nats.sink import message_id as record_message_id
from icetail.sinks.rabbitmq.ids import first_publishing_id

PROPERTY_OP = "Icetail-Op"
PROPERTY_TABLE = "Icetail-Table"
PROPERTY_SNAPSHOT = "Icetail-Snapshot-Id"
PROPERTY_ORDINAL = "Icetail-Change-Ordinal"
PROPERTY_KEY = "Icetail-Key"
CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class StreamMessage:
    """One message as published: its publishing id and its AMQP 1.0 encoding."""

    publishing_id: int
    data: bytes
    message_id: str


def stream_messages(key: ChunkKey, records: pa.Table, key_columns: Sequence[str] = ()) -> list[StreamMessage]:
    """The messages of a chunk's envelope records, in order, with rising publishing ids (ids.py)."""
    from rstream import AMQPMessage, Properties

    if not records.num_rows:
        return []
    first_id = first_publishing_id(key, records.num_rows)
    payloads = encode_jsonl(records).split(b"\n")[:-1]
    source = records.column("source").combine_chunks()
    ops = records.column("op").to_pylist()
    dbs = source.field("db").to_pylist()
    tables = source.field("table").to_pylist()
    snapshots = source.field("snapshot_id").to_pylist()
    ordinals = source.field("change_ordinal").to_pylist()
    keys = record_key_values(records, key_columns, "RabbitMQ stream sink") if key_columns else None
    out = []
    for i, payload in enumerate(payloads):
        table = f"{dbs[i]}.{tables[i]}" if dbs[i] else tables[i]
        # the NATS sink's id (unique per record, also in a chunk of a reconciled partition): informational here
        message_id = record_message_id(key, snapshots[i], ordinals[i], i)
        properties = {
            PROPERTY_OP: ops[i],
            PROPERTY_TABLE: table,
            PROPERTY_SNAPSHOT: str(snapshots[i]),
            PROPERTY_ORDINAL: str(ordinals[i]),
        }
        if keys is not None:
            properties[PROPERTY_KEY] = json.dumps(keys[i], default=str)
        message = AMQPMessage(
            body=payload,
            properties=Properties(message_id=message_id, subject=table, content_type=CONTENT_TYPE),
            application_properties=properties,
        )
        out.append(StreamMessage(first_id + i, bytes(message), message_id))
    return out
