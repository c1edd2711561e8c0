"""The bus sinks of a trial (NATS JetStream, Redis Streams, RabbitMQ Streams): a fresh stream per
trial (created by the run, `create=true`), read back whole by the harness, deleted at the end.

Each message or entry is one Debezium envelope (docs/sinks.md); `Envelope` keeps it with the
snapshot id its metadata names (the NATS header `Icetail-Snapshot-Id`, the Redis field
`snapshot_id`, the RabbitMQ application property `Icetail-Snapshot-Id`), which the check compares
with the envelope's own `source.snapshot_id`. The servers: NATS_URL, REDIS_URL and
RABBITMQ_STREAM_URL as the sink tests take them (defaults on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

BUS_SINKS = ("nats", "redis", "rabbitmq")
END_MARK = b"icetail-chaos-end-"  # RabbitMQ: the harness's own end marker, read up to and skipped

_NATS = urlsplit(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
_REDIS = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
_RABBIT = urlsplit(os.environ.get("RABBITMQ_STREAM_URL", "rabbitmq-stream://guest:guest@127.0.0.1:5552"))
NATS_SERVER = f"{_NATS.hostname or '127.0.0.1'}:{_NATS.port or 4222}"
REDIS_SERVER = f"{_REDIS.hostname or '127.0.0.1'}:{_REDIS.port or 6379}"
RABBIT_HOST, RABBIT_PORT = _RABBIT.hostname or "127.0.0.1", _RABBIT.port or 5552
RABBIT_USER, RABBIT_PASSWORD = _RABBIT.username or "guest", _RABBIT.password or "guest"
READ_TIMEOUT = 60.0


@dataclass(frozen=True)
class Envelope:
    envelope: dict[str, Any] | None  # None: not one JSON object
    snapshot_id: str  # as the message's metadata names it


def new_stream(kind: str) -> tuple[str, str]:
    """A fresh stream's name and the sink URL that creates it on the first change, keyed by `id`."""
    tag = uuid.uuid4().hex[:10]
    if kind == "nats":  # subjects of its own: JetStream refuses streams whose subjects overlap
        stream = f"ICETAIL_CHAOS_{tag}"
        return stream, f"nats://{NATS_SERVER}/chaos_{tag}?stream={stream}&create=true&key=id"
    if kind == "redis":
        stream = f"icetail-chaos:{tag}"
        return stream, f"redis-stream://{REDIS_SERVER}/{stream}?create=true&key=id"
    if kind == "rabbitmq":
        stream = f"icetail-chaos-{tag}"
        user = f"{RABBIT_USER}:{RABBIT_PASSWORD}"
        return stream, f"rabbitmq-stream://{user}@{RABBIT_HOST}:{RABBIT_PORT}/{stream}?create=true&key=id"
    raise ValueError(kind)


def unreachable(kind: str) -> str | None:
    """Why the `kind` sink cannot be used here (its client missing, its server not listening), or None."""
    module, host, port = {
        "nats": ("nats", _NATS.hostname or "127.0.0.1", _NATS.port or 4222),
        "redis": ("redis", _REDIS.hostname or "127.0.0.1", _REDIS.port or 6379),
        "rabbitmq": ("rstream", RABBIT_HOST, RABBIT_PORT),
    }[kind]
    try:
        __import__(module)
    except ImportError:
        return f"the {kind} sink's client ({module}) is not installed"
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as exc:
        return f"no {kind} server at {host}:{port} ({exc})"


def read(kind: str, stream: str) -> list[Envelope]:
    """Every message of `stream` from its start, in stream order ([] before the run created it)."""
    if kind == "nats":
        return asyncio.run(_nats_read(stream))
    if kind == "redis":
        return _redis_read(stream)
    if kind == "rabbitmq":
        return asyncio.run(_rabbit_read(stream))
    raise ValueError(kind)


def drop(kind: str, stream: str) -> None:
    """The stream deleted (and the Redis sink's marks), whatever it holds; nothing if it is not there."""
    if kind == "nats":
        asyncio.run(_nats_delete(stream))
    elif kind == "redis":
        from icetail.sinks.redis.script import marks_key

        _redis().delete(stream, marks_key(stream))
    elif kind == "rabbitmq":
        asyncio.run(_rabbit_delete(stream))


def _parse(data: bytes, snapshot_id: Any) -> Envelope:
    text = snapshot_id.decode() if isinstance(snapshot_id, bytes) else str(snapshot_id)
    try:
        value = json.loads(data)
    except ValueError:
        return Envelope(None, text)
    return Envelope(value if isinstance(value, dict) else None, text)


async def _nats_read(stream: str) -> list[Envelope]:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(f"nats://{NATS_SERVER}")
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(stream)
        except NotFoundError:
            return []
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            out.append(_parse(msg.data or b"", (msg.headers or {}).get("Icetail-Snapshot-Id", "")))
        return out
    finally:
        await nc.close()


async def _nats_delete(stream: str) -> None:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(f"nats://{NATS_SERVER}")
    try:
        try:
            await nc.jetstream().delete_stream(stream)
        except NotFoundError:
            pass
    finally:
        await nc.close()


def _redis() -> Any:
    import redis

    return redis.Redis(host=_REDIS.hostname or "127.0.0.1", port=_REDIS.port or 6379)


def _redis_read(stream: str) -> list[Envelope]:
    client = _redis()
    out = []
    start = "-"
    while True:  # in pages: a trial's stream holds thousands of entries
        page = client.xrange(stream, min=start, count=5000)
        out += [_parse(fields.get(b"envelope", b""), fields.get(b"snapshot_id", b"")) for _, fields in page]
        if len(page) < 5000:
            return out
        start = "(" + page[-1][0].decode()


async def _rabbit_client() -> Any:
    from rstream.client import Client

    client = Client(RABBIT_HOST, RABBIT_PORT, frame_max=1 << 20, heartbeat=60, connection_closed_handler=lambda _: None)
    await client.start()
    await client.authenticate("/", RABBIT_USER, RABBIT_PASSWORD)
    return client


async def _rabbit_delete(stream: str) -> None:
    client = await _rabbit_client()
    try:
        if await client.stream_exists(stream):
            await client.delete_stream(stream)
    finally:
        await client.close()


async def _rabbit_read(stream: str) -> list[Envelope]:
    """From the first offset up to an end marker the harness publishes first (markers are skipped)."""
    from rstream import AMQPMessage, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder
    from rstream.consumer import Consumer

    client = await _rabbit_client()
    try:
        if not await client.stream_exists(stream):
            return []
    finally:
        await client.close()
    marker = END_MARK + uuid.uuid4().hex.encode()
    async with Producer(RABBIT_HOST, RABBIT_PORT, username=RABBIT_USER, password=RABBIT_PASSWORD) as producer:
        await producer.send_wait(stream, AMQPMessage(body=marker))
    got: list[Envelope] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(message: Any, _context: Any) -> None:
        body = b"".join(message.body) if isinstance(message.body, list) else bytes(message.body)
        if body.startswith(END_MARK):
            if body == marker and not done.done():
                done.set_result(None)
            return
        props = {_text(k): _text(v) for k, v in (message.application_properties or {}).items()}
        got.append(_parse(body, props.get("Icetail-Snapshot-Id", "")))

    consumer = Consumer(RABBIT_HOST, RABBIT_PORT, username=RABBIT_USER, password=RABBIT_PASSWORD)
    await consumer.start()
    try:
        offset = ConsumerOffsetSpecification(OffsetType.FIRST, None)
        await consumer.subscribe(stream, on_message, decoder=amqp_decoder, offset_specification=offset)
        await asyncio.wait_for(done, READ_TIMEOUT)
    finally:
        await consumer.close()
    return got


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
