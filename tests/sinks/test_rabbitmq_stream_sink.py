"""The RabbitMQ Streams sink against a real broker (RABBITMQ_STREAM_URL, default
rabbitmq-stream://guest:guest@127.0.0.1:5552, the stream plugin on): URL parsing, the envelope and its
properties, a replayed chunk stored once, the refusals (missing stream, unreachable port, wrong
credentials, a message over the frame size), a connection lost mid-chunk then replayed, pipeline
runs of two tables onto one stream, `icetail run` SIGKILLed at seeded moments (one inside a chunk's
write) and `icetail serve` with a pattern of two tables onto one stream: each read back from the
stream's first offset and its Debezium envelopes replayed onto the previous snapshot's rows.
Each test's stream is new and deleted after. Skipped, saying why, without a reachable broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, SinkSetupError, TransientError
from icetail.kernel.model import ChangeType
from icetail.sinks.rabbitmq.ids import producer_name
from icetail.sinks.registry import check_sink_reachable, open_sink
from icetail.sinks.urls import parse_sink_url
from tests.sinks import CONSUMER, change_rows, key
from tests.support import bus_streams as bus
from tests.support.catalogs import catalogs_in_process, new_catalog
from tests.support.crash import Attempt, KillTrigger, crash_loop
from tests.support.processes import child_env, icetail_command
from tests.support.serve import Serve, free_port, wait_until
from tests.support.stores import view_state

BROKER_URL = os.environ.get("RABBITMQ_STREAM_URL", "rabbitmq-stream://guest:guest@127.0.0.1:5552")
_PARTS = urlsplit(BROKER_URL)
HOST, PORT = _PARTS.hostname or "127.0.0.1", _PARTS.port or 5552
USER, PASSWORD = _PARTS.username or "guest", _PARTS.password or "guest"
SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261204"))


def _unreachable() -> str | None:
    start = "rabbitmq-plugins enable rabbitmq_stream"
    return bus.unreachable("rstream", "rabbitmq", HOST, PORT, "RabbitMQ stream port", start)


async def _client() -> Any:
    from rstream.client import Client

    client = Client(HOST, PORT, frame_max=1 << 20, heartbeat=60, connection_closed_handler=lambda _: None)
    await client.start()
    await client.authenticate("/", USER, PASSWORD)
    return client


async def _admin(action: str, stream: str, reference: str = "") -> Any:
    client = await _client()
    try:
        if action == "create":
            return await client.create_stream(stream)
        if action == "delete":
            try:
                return await client.delete_stream(stream)
            except Exception:
                return None
        if action == "exists":
            return await client.stream_exists(stream)
        assert action == "sequence"
        return await client.query_publisher_sequence(stream, reference)
    finally:
        await client.close()


@dataclass(frozen=True)
class Read:
    body: dict[str, Any]
    properties: dict[str, str]
    message_id: str
    subject: str


async def _read_all(stream: str) -> list[Read]:
    """Every message of `stream` from its first offset: an end marker is published, then read up to it."""
    from rstream import AMQPMessage, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder
    from rstream.consumer import Consumer

    marker = f"end-{uuid.uuid4().hex}".encode()
    async with Producer(HOST, PORT, username=USER, password=PASSWORD) as producer:
        await producer.send_wait(stream, AMQPMessage(body=marker))
    got: list[Read] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(message: Any, context: Any) -> None:
        body = _body(message)
        if body == marker:
            if not done.done():
                done.set_result(None)
            return
        got.append(_decoded(message, body))

    consumer = Consumer(HOST, PORT, username=USER, password=PASSWORD)
    await consumer.start()
    try:
        await consumer.subscribe(
            stream,
            on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        )
        await asyncio.wait_for(done, 20)
    finally:
        await consumer.close()
    return got


def _body(message: Any) -> bytes:
    return b"".join(message.body) if isinstance(message.body, list) else bytes(message.body)


def _decoded(message: Any, body: bytes) -> Read:
    """A message as the tests read it: its envelope, application properties, message id and subject."""
    props = {_text(k): _text(v) for k, v in (message.application_properties or {}).items()}
    p = message.properties
    return Read(json.loads(body), props, _text(p.message_id), _text(p.subject))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def stream() -> Iterator[str]:
    """A fresh stream name (not created), deleted at teardown."""
    if reason := _unreachable():
        pytest.skip(reason)
    name = f"icetail-test-{uuid.uuid4().hex[:10]}"
    yield name
    _run(_admin("delete", name))


def _url(stream: str, query: str = "?create=true", *, port: int = PORT, user: str = f"{USER}:{PASSWORD}") -> str:
    return f"rabbitmq-stream://{user}@{HOST}:{port}/{stream}{query}"


# URL parsing: no broker needed ----------------------------------------------------------


def test_the_url_is_parsed_once_without_a_password() -> None:
    target = parse_sink_url("rabbitmq-stream://app:s3cret@mq.internal/cdc-orders?create=true&key=id,region&vhost=prod")
    assert target.scheme == "rabbitmq-stream" and target.rabbitmq is not None
    rabbit = target.rabbitmq
    assert (rabbit.host, rabbit.port, rabbit.vhost, rabbit.stream) == ("mq.internal", 5552, "prod", "cdc-orders")
    assert (rabbit.user, rabbit.password, rabbit.create, rabbit.key) == ("app", "s3cret", True, ("id", "region"))
    assert target.normalized() == "rabbitmq-stream://app@mq.internal:5552/cdc-orders?vhost=prod&key=id,region"
    assert "s3cret" not in repr(target) and "s3cret" not in repr(rabbit)
    same = parse_sink_url("RABBITMQ-STREAM://app:other@mq.internal:5552/cdc-orders?key=id,region&vhost=prod")
    assert same.normalized() == target.normalized()  # create= is not where the changes go
    plain = parse_sink_url("rabbitmq-stream://localhost/s").rabbitmq
    assert plain is not None and (plain.user, plain.password, plain.vhost) == ("guest", "guest", "/")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("rabbitmq-stream://u:hunter22@h:5552/", "it names no stream"),
        ("rabbitmq-stream://u:hunter22@h:5552/a/b", "is not a stream name"),
        ("rabbitmq-stream://u:hunter22@h:5552/s?creat=true", "did you mean create?"),
        ("rabbitmq-stream://u:hunter22@h:5552/s?create=maybe", "must be true or false"),
        ("rabbitmq-stream://u:hunter22@h:5552/s?key=id,,x", "must name columns"),
        ("rabbitmq-stream://u:hunter22@h:port/s", "not usable"),
        ("rabbitmq-stream://u:hunter22@h/s?key=a&key=b", "more than once"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, reason: str) -> None:
    bus.refused_in_one_line(url, reason, "hunter22")


def test_parsing_imports_no_driver() -> None:
    assert bus.modules_after_parsing("rabbitmq-stream://h/s", ["rstream", "pyarrow"]) == [False, False]


def test_the_messages_are_encoded_as_rstream_encodes_them() -> None:
    """The sink's own AMQP 1.0 encoding equals rstream's `bytes(AMQPMessage(...))` byte for byte, across
    each length's small and large form (255/256 octets), non-ASCII text and many properties."""
    rstream = pytest.importorskip("rstream")
    from icetail.sinks.rabbitmq.messages import CONTENT_TYPE, amqp_message

    rng = random.Random(46)

    def text(n: int) -> str:
        return "".join(rng.choice('aé€x{}"') for _ in range(n))

    for _ in range(2000):
        body = text(rng.choice([0, 1, 10, 200, 255, 256, 5000])).encode()
        message_id, subject = text(rng.choice([1, 85, 86, 255, 256, 400])), text(rng.choice([1, 100, 300]))
        pairs = rng.choice([1, 4, 5, 130])
        properties = {text(rng.choice([1, 10, 300])): text(rng.choice([0, 1, 100, 300])) for _ in range(pairs)}
        expected = rstream.AMQPMessage(
            body=body,
            properties=rstream.Properties(message_id=message_id, subject=subject, content_type=CONTENT_TYPE),
            application_properties=properties,
        )
        assert amqp_message(body, message_id, subject, properties) == bytes(expected)


@pytest.mark.parametrize("shared", [False, True])
def test_a_chunk_is_encoded_at_once_to_the_same_bytes_and_frames_as_rstream_writes(
    shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """frames.py's Arrow encoding of a whole chunk equals `amqp_message` (rstream's bytes, the test above) for
    each record, across the small and large forms (a body, a subject, a key of <= 255 or more octets, the
    property list and map over 255), non-ASCII text, parts, and values every record shares (`shared`: one
    table, snapshot, ordinal and op, encoded once); its Publish frames equal rstream's."""
    pytest.importorskip("rstream")
    from rstream import schema
    from rstream.encoding import encode_publish

    from icetail.sinks.bus.records import record_key_values
    from icetail.sinks.files.jsonl_encoding import encode_jsonl
    from icetail.sinks.nats.sink import message_id
    from icetail.sinks.rabbitmq import frames
    from icetail.sinks.rabbitmq.messages import amqp_message

    rng = random.Random(4646)
    n = 40

    names = ["x" * 300] if shared else ["t", "é" * 140, "x" * 300]

    def drawn(choose: Any) -> list[Any]:
        return [choose()] * n if shared else [choose() for _ in range(n)]

    records = pa.table(
        {
            "op": pa.array(drawn(lambda: rng.choice("cudr"))),
            "source": pa.StructArray.from_arrays(
                [
                    pa.array(drawn(lambda: rng.choice(["ns", "", None])), pa.string()),
                    pa.array(drawn(lambda: rng.choice(names))),
                    pa.array(drawn(lambda: rng.randrange(1, 1 << 62)), pa.int64()),
                    pa.array(drawn(lambda: rng.randrange(0, 50)), pa.int32()),
                ],
                ["db", "table", "snapshot_id", "change_ordinal"],
            ),
            "after": pa.StructArray.from_arrays(
                [pa.array(["€" * rng.choice([0, 1, 60, 200]) for _ in range(n)])], ["k"]
            ),
            "before": pa.array([None] * n, pa.struct([("k", pa.string())])),
        }
    )
    chunk = key(3, 70)
    monkeypatch.setattr(frames, "PART_RECORDS", 16)
    parts = list(frames.encoded_parts(chunk, records, ["k"]))
    assert [p.count for p in parts] == [16, 16, 8]
    bodies = encode_jsonl(records).split(b"\n")[:-1]
    keys = record_key_values(records, ["k"], "test")
    source = records.column("source").to_pylist()
    sizes = set()
    for i in range(n):
        part, j = parts[i // 16], i % 16
        db, table = source[i]["db"], source[i]["table"]
        subject = f"{db}.{table}" if db else table
        properties = {
            "Icetail-Op": records.column("op")[i].as_py(),
            "Icetail-Table": subject,
            "Icetail-Snapshot-Id": str(source[i]["snapshot_id"]),
            "Icetail-Change-Ordinal": str(source[i]["change_ordinal"]),
            "Icetail-Key": json.dumps(keys[i], default=str),
        }
        mid = message_id(chunk, source[i]["snapshot_id"], source[i]["change_ordinal"], i)
        assert part.message_ids[j].as_py() == mid
        assert part.message(j) == amqp_message(bodies[i], mid, subject, properties), i
        sizes.add((len(bodies[i]) > 255, len(subject.encode()) > 255, len(properties["Icetail-Key"]) > 255))
    assert shared or all({form[d] for form in sizes} == {False, True} for d in range(3))  # each length's both forms
    assert parts[0].first_id == (70 << 28) + 1 and parts[-1].last_id == (70 << 28) + n
    for part in parts:
        cut = list(part.frames(1, 2000, 5))
        assert cut[0][0] == 1 and cut[-1][1] == part.count
        assert all(b - a <= 5 and (b - a == 1 or len(part.frame(0, a, b)) <= 2000) for a, b in cut)
        for a, b in cut:
            messages = [schema.Message(publishing_id=part.first_id + i, filter_value=None, data=part.message(i))
                        for i in range(a, b)]  # fmt: skip
            assert part.frame(0, a, b) == encode_publish(schema.Publish(publisher_id=0, messages=messages))


# against the broker -----------------------------------------------------------------------


def test_a_replayed_chunk_is_stored_once_with_its_properties(stream: str) -> None:
    sink = open_sink(_url(stream, "?create=true&key=id"), consumer=CONSUMER, table="ns.orders")
    try:
        rows = change_rows([1, 2, 3])
        first = sink.write(key(0, 100), rows)
        again = sink.write(key(0, 100), rows)  # the crash between the write and the offset commit, replayed
        assert first == again
        update = pa.concat_tables(
            [
                change_rows([2], change_type=ChangeType.UPDATE_BEFORE),
                change_rows([2], change_type=ChangeType.UPDATE_AFTER),
            ]
        )
        sink.write(key(1, 0), pa.concat_tables([update, change_rows([4])]))  # an update is one record of two rows
    finally:
        sink.close()
    assert sink.inner.duplicates == 3  # type: ignore[attr-defined]
    # a new connection (another process, after a crash) replays the first chunk: nothing is added
    rerun = open_sink(_url(stream, "?key=id"), consumer=CONSUMER, table="ns.orders")
    try:
        rerun.write(key(0, 100), change_rows([1, 2, 3]))
    finally:
        rerun.close()
    messages = _run(_read_all(stream))
    assert len(messages) == 5
    first_message = messages[0]
    assert first_message.subject == "ns.orders"
    assert first_message.message_id == f"{CONSUMER}:1001:0:{key(0).batch_id}:0:100:0"
    assert first_message.properties == {
        "Icetail-Op": "c",
        "Icetail-Table": "ns.orders",
        "Icetail-Snapshot-Id": "1001",
        "Icetail-Change-Ordinal": "0",
        "Icetail-Key": "[1]",
    }
    assert first_message.body["after"] == {"id": 1, "name": "n1"} and first_message.body["before"] is None
    # split index, the chunk's first row (or partition), the record's index in the chunk
    assert [m.message_id.rsplit(":", 3)[1:] for m in messages] == [["0", "100", "0"], ["0", "100", "1"],
                                                                   ["0", "100", "2"], ["1", "0", "0"],
                                                                   ["1", "0", "1"]]  # fmt: skip
    assert [m.properties["Icetail-Op"] for m in messages[3:]] == ["u", "c"]
    assert _run(_admin("sequence", stream, producer_name(key(1)))) > 0


def test_a_missing_stream_is_refused_naming_the_fix(stream: str) -> None:
    url = _url(stream, "")
    with pytest.raises(ConfigError, match=f"stream '{stream}' does not exist.*add \\?create=true") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value) and PASSWORD not in str(caught.value)
    with pytest.raises(ConfigError, match="does not exist"):
        open_sink(url, consumer=CONSUMER)
    check_sink_reachable(parse_sink_url(url + "?create=true"))  # reaching creates nothing ...
    assert not _run(_admin("exists", stream))  # ... as this shows


def test_an_unreachable_port_is_a_transient_error_in_one_line() -> None:
    if reason := _unreachable():
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"rabbitmq-stream://u:hunter22@127.0.0.1:{port}/s"
    with pytest.raises(SinkError, match=rf"RabbitMQ stream port 127.0.0.1:{port} cannot be reached .*start") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value) and isinstance(caught.value, TransientError)
    assert "hunter22" not in str(caught.value)
    with pytest.raises(SinkError, match="cannot be reached"):
        open_sink(url, consumer=CONSUMER)


def test_wrong_credentials_are_refused_naming_the_fix(stream: str) -> None:
    url = _url(stream, user=f"{USER}:wrong-hunter22")
    with pytest.raises(SinkSetupError, match=r"refused the sink's credentials.*fix USER:PASSWORD") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value) and "hunter22" not in str(caught.value)
    with pytest.raises(SinkSetupError):
        open_sink(url, consumer=CONSUMER)
    assert not _run(_admin("exists", stream))


def test_a_message_over_the_frame_size_is_refused_naming_the_fix(stream: str) -> None:
    sink = open_sink(_url(stream), consumer=CONSUMER, table="ns.t")
    try:
        big = change_rows([1, 2], extra={"blob": pa.array(["x", "x" * (1 << 20)])})
        with pytest.raises(SinkRejectedError, match=r"over the \d+ one frame .* raise stream.frame_max") as caught:
            sink.write(key(0), big)
        assert "\n" not in str(caught.value)
        sink.write(key(0, 2), change_rows([3]))  # the sink still works ...
    finally:
        sink.close()
    assert [m.body["after"]["id"] for m in _run(_read_all(stream))] == [3]  # ... and sent nothing of the big chunk


def test_a_chunk_published_in_parts_and_cut_midway_is_completed_once(
    stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's parts go one after another (the next encoded while one is sent); replayed after a
    cut inside a part, it sends only the messages after the highest id the broker stored. Frames go
    as the sink wrote them (rstream's raw write), or through rstream's encoding without it."""
    from rstream.connection import Connection

    from icetail.sinks.rabbitmq import connection, frames

    assert hasattr(Connection, "_write_frame_raw")  # the pinned rstream's: the sink's frames go as they are
    monkeypatch.setattr(frames, "PART_RECORDS", 3)
    rows = change_rows(list(range(10)))
    sink = open_sink(_url(stream), consumer=CONSUMER, table="ns.t")
    try:
        sink.write(key(0, 9), rows.slice(0, 5))  # what the broker stored of the chunk before the cut
        token = sink.write(key(0, 9), rows)  # its replay: parts 0-2 (stored), 3-5 (3 and 4 stored), 6-8, 9
        assert sink.inner.duplicates == 5  # type: ignore[attr-defined]
        monkeypatch.setattr(connection, "raw_writer", lambda client: None)  # an rstream without it
        sink.write(key(0, 19), change_rows([10, 11]))
    finally:
        sink.close()
    first = (9 << 28) + 1
    assert token == f"{stream}:{producer_name(key(0))}:{first}-{first + 9}"
    messages = _run(_read_all(stream))
    assert [m.body["after"]["id"] for m in messages] == list(range(12))
    assert [m.message_id.rsplit(":", 1)[1] for m in messages] == [str(i) for i in range(10)] + ["0", "1"]


class _PacedProxy:
    """127.0.0.1:`port` forwarded to the broker, what clients send paced to `rate` bytes a second (replies are
    not): a sink write of a chunk of a few MB takes about a second, long enough for a kill to land inside it
    with part of the chunk stored. What a killed client sent before it died still reaches the broker, as
    from a socket's buffers."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="paced-proxy").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection((HOST, PORT), timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, paced: bool) -> None:
        piece = max(1, self.rate // 100)  # 10 ms worth of bytes at a time
        try:
            while True:
                data = source.recv(piece if paced else 65536)
                if not data:
                    break
                sink.sendall(data)
                if paced:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            try:
                sock.close()
            except OSError:
                pass


PACED_RATE = 2 << 20  # bytes a second a paced link carries: a chunk of 5000 small changes takes ~1-2 s


async def _cut_once_stored(stream: str, producer: str, proxy: _PacedProxy, started: threading.Event) -> None:
    """Close `proxy` (the broker gone, every socket reset) as soon as the broker stored part of `producer`'s chunk."""
    client = await _client()
    try:
        started.set()
        deadline = time.monotonic() + 30
        while await client.query_publisher_sequence(stream, producer) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        proxy.close()
    finally:
        await client.close()


def test_a_connection_lost_mid_chunk_is_replayed_without_loss_or_duplicates(stream: str) -> None:
    count = 5000
    rows = change_rows(list(range(count)), extra={"pad": pa.array(["p" * 100] * count)})
    chunk = key(0, 0)
    # a paced link: the chunk's frames of 1000 messages reach the broker over ~2 s, so the cut lands with part
    # of the chunk stored (on a link at full speed the broker often stored all of it before the cut)
    proxy = _PacedProxy(PACED_RATE)
    try:
        sink = open_sink(_url(stream, port=proxy.port), consumer=CONSUMER, table="ns.t")
        started = threading.Event()
        watcher = threading.Thread(target=_run, args=(_cut_once_stored(stream, producer_name(chunk), proxy, started),))
        watcher.start()
        started.wait(10)
        try:
            with pytest.raises(SinkError, match="lost before every message was confirmed") as caught:
                sink.write(chunk, rows)
        finally:
            watcher.join(30)
            sink.close()
    finally:
        proxy.close()
    assert "\n" not in str(caught.value) and PASSWORD not in str(caught.value)
    stored = _run(_admin("sequence", stream, producer_name(chunk)))
    assert 0 < stored < count  # part of the chunk is on the stream
    again = open_sink(_url(stream, ""), consumer=CONSUMER, table="ns.t")  # the rerun, on a broker that is back
    try:
        again.write(chunk, rows)
        assert again.inner.duplicates == stored  # type: ignore[attr-defined]
    finally:
        again.close()
    ids = [m.body["after"]["id"] for m in _run(_read_all(stream))]
    assert ids == list(range(count))  # nothing lost, nothing twice, in order


# pipeline runs and crashes: the stream read back and replayed ----------------------------


class _StreamWatch:
    """One rstream consumer, in a thread of its own, reading `stream` from its first offset as it grows:
    `probe` (crash_loop's) counts the messages so far, without a round trip, so a kill can land a few
    ms after a sink write's first messages were stored; `messages` publishes an end marker and returns
    every message before it (markers are skipped: bodies of `_MARKER` and a uuid)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._seen: list[Read] = []
        self._markers: set[bytes] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rabbit-watch", daemon=True)
        self._thread.start()
        self._consumer: Any = None
        self._call(self._start(), 20)

    def _call(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        from rstream import ConsumerOffsetSpecification, OffsetType, amqp_decoder
        from rstream.consumer import Consumer

        self._consumer = Consumer(HOST, PORT, username=USER, password=PASSWORD)
        await self._consumer.start()
        await self._consumer.subscribe(
            self.stream,
            self._on_message,
            decoder=amqp_decoder,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            initial_credit=100,
        )

    def _on_message(self, message: Any, context: Any) -> None:
        body = _body(message)
        if body.startswith(_MARKER):
            with self._lock:
                self._markers.add(body)
            return
        read = _decoded(message, body)
        with self._lock:
            self._seen.append(read)

    def probe(self, kind: str) -> int:
        with self._lock:
            return len(self._seen)

    def messages(self, timeout: float = 30) -> list[Read]:
        from rstream import AMQPMessage, Producer

        marker = _MARKER + uuid.uuid4().hex.encode()

        async def send() -> None:
            async with Producer(HOST, PORT, username=USER, password=PASSWORD) as producer:
                await producer.send_wait(self.stream, AMQPMessage(body=marker))

        _run(send())
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if marker in self._markers:
                    return list(self._seen)
            assert time.monotonic() < deadline, f"the end marker of {self.stream} was not read in {timeout}s"
            time.sleep(0.01)

    def read(self) -> pa.Table | None:
        """crash_loop's: the messages as a table (message id, table, op, snapshot, envelope)."""
        got = self.messages()
        return pa.table(
            {
                "message_id": [m.message_id for m in got],
                "table": [m.subject for m in got],
                "op": [m.properties["Icetail-Op"] for m in got],
                "snapshot_id": [int(m.properties["Icetail-Snapshot-Id"]) for m in got],
                "envelope": [json.dumps(m.body) for m in got],
            }
        )

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._call(self._consumer.close(), 10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


_MARKER = b"icetail-test-end-"


def _rewrite(table: Any, changed: dict[int, str | None]) -> None:
    """One overwrite snapshot replacing every live file by one file of the rows with `changed` applied (id to
    its new v; None: the row deleted; a new id: added): updates, deletes and inserts in one snapshot, which
    the pipeline pairs into updates by id. (pyiceberg's upsert and overwrite commit a delete then an append.)"""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    rows = {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
    rows.update(changed)
    kept = sorted((i, v) for i, v in rows.items() if v is not None)
    rewritten = pa.table({"id": [i for i, _ in kept], "v": [v for _, v in kept]}, schema=bus.ARROW)
    new_files = list(_dataframe_to_data_files(table.metadata, rewritten, table.io))
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        for task in table.scan().plan_files():
            overwrite.delete_data_file(task.file)
        for data_file in new_files:
            overwrite.append_data_file(data_file)


def _check_each_snapshot(table: Any, messages: list[Read]) -> None:
    """No change twice (by message id, and by snapshot, op and key); each snapshot's messages, in stream
    order, replayed onto the previous snapshot's rows give its rows."""
    ids = [m.message_id for m in messages]
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} messages twice"
    changes = [(m.properties["Icetail-Snapshot-Id"], m.properties["Icetail-Op"], m.properties["Icetail-Key"])
               for m in messages]  # fmt: skip
    assert len(set(changes)) == len(changes), "a change twice"
    assert all(m.body["source"]["snapshot_id"] == int(m.properties["Icetail-Snapshot-Id"]) for m in messages)
    bus.check_each_snapshot(table, [m.body for m in messages])


CRASH_CHUNK = 5000  # changes of one chunk of the first, large append: 5 frames of 1000 messages


def test_sigkill_delivers_every_change_once(stream: str, tmp_path: Path) -> None:
    """`icetail run` SIGKILLed at seeded moments (inside a sink write, right after one, at start-up) until it
    finishes: the stream, read from its first offset, holds every change of every snapshot once."""
    local = new_catalog(tmp_path / "cat", "rabbitcrash")
    (table,) = bus.id_v_tables(local, ["events"])
    rng = random.Random(f"{SEED}:rabbitmq")
    big = 2 * CRASH_CHUNK
    table.append(pa.table({"id": list(range(big)), "v": [f"v{i}" for i in range(big)]}, schema=bus.ARROW))
    big_snapshot = local.load("ns.events").metadata.current_snapshot_id
    steps = [
        lambda t: t.delete("id < 300"),
        lambda t: _rewrite(t, {400: "x", 500: "y", 600: "z", 700: None, big + 1: "new"}),
        lambda t: t.append(pa.table({"id": list(range(big + 10, big + 90)), "v": ["w"] * 80}, schema=bus.ARROW)),
    ]
    for step in steps:
        step(local.load("ns.events"))
    table = local.load("ns.events")
    _run(_admin("create", stream))
    watch = _StreamWatch(stream)
    proxy = _PacedProxy(PACED_RATE)
    state_url = f"sqlite:///{tmp_path}/state.db"
    consumer = "events-rabbit"
    env = child_env([local], tmp_path / "spark", extra={"ICETAIL_LOCAL_MAX_BYTES": str(1 << 30)})
    cmd = [
        *icetail_command(), "run", "--catalog", local.name, "--table", "ns.events", "--state", state_url,
        "--sink", _url(stream, "?key=id", port=proxy.port), "--consumer", consumer, "--until-caught-up",
        "--max-snapshots-per-batch", "1", "--chunk-rows", str(CRASH_CHUNK), "--identifier-columns", "id",
    ]  # fmt: skip
    schedule = [
        # after the first frame of the first chunk is stored: inside that write, part of the chunk stored
        KillTrigger("started", rng.uniform(0.05, 0.3), 1),
        KillTrigger("time", rng.uniform(0.2, 1.5)),  # start-up
        # a few ms after a seeded number of messages landed: inside a write, or between it and its commit
        KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(1, CRASH_CHUNK)),
    ]
    inside: list[int] = []  # runs killed with part of a chunk of the large append on the stream

    def check(attempt: Attempt, got: pa.Table | None) -> None:
        assert got is not None
        ids = got.column("message_id").to_pylist()
        assert len(set(ids)) == len(ids), f"a message twice after run {attempt.index}"
        bus.replay([json.loads(e) for e in got.column("envelope").to_pylist()])  # no change of a missing row
        held = got.column("snapshot_id").to_pylist().count(big_snapshot)
        state = attempt.state
        assert state is not None
        attempt.note += f"; {held} of the large append on the stream"
        if attempt.killed and held % CRASH_CHUNK and held < big:
            inside.append(attempt.index)  # the stream stored part of a chunk, whose offset was never committed

    try:
        report = crash_loop(
            cmd, env, state_url=state_url, consumer=consumer, sink=watch,  # type: ignore[arg-type]
            schedule=schedule, logs=tmp_path / "logs", check=check, timeout=60, final_timeout=120,
        )  # fmt: skip
        messages = watch.messages()
    finally:
        watch.close()
        proxy.close()
    summary = f"seed {SEED}\n{report.summary()}"
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    assert report.kills >= 1, summary
    assert inside, f"no kill landed inside a sink write\n{summary}"
    assert view_state(state_url, consumer).cursor == table.metadata.current_snapshot_id, summary
    assert {m.properties["Icetail-Op"] for m in messages} == {"c", "d", "u"}, summary
    _check_each_snapshot(table, messages)
    assert bus.replay([m.body for m in messages]) == bus.table_rows(table), summary


def test_pipeline_runs_of_two_tables_onto_one_stream_replay_to_each_tables_rows(
    stream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshots of two tables (append, delete, an overwrite updating rows, pyiceberg's overwrite of all rows),
    each table its own consumer onto one stream: after each round of runs, each table's messages replayed onto
    nothing give its rows, and each snapshot's onto the snapshot before give that snapshot's rows."""
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    monkeypatch.setenv("ICETAIL_LOCAL_MAX_BYTES", str(1 << 30))
    local = new_catalog(tmp_path / "cat", "rabbitcat")
    names = ["orders", "refunds"]
    tables = dict(zip(names, bus.id_v_tables(local, names), strict=True))
    configs = {
        name: PipelineConfig(
            "rabbitcat", f"ns.{name}", f"sqlite:///{tmp_path}/state.db", _url(stream, "?create=true&key=id"),
            consumer=f"{name}-rabbit", chunk_rows=2,
        )
        for name in names
    }  # fmt: skip
    steps = [
        lambda t: t.append(pa.table({"id": [1, 2, 3, 4, 5], "v": ["a", "b", "c", "d", "e"]}, schema=bus.ARROW)),
        lambda t: t.delete("id = 2"),
        lambda t: _rewrite(t, {3: "c2", 4: None, 6: "f"}),  # an update, a delete and an insert in one snapshot
        lambda t: t.overwrite(pa.table({"id": [1, 7], "v": ["a2", "g"]}, schema=bus.ARROW)),  # all rows replaced
    ]
    _run(_admin("create", stream))
    watch = _StreamWatch(stream)
    try:
        with catalogs_in_process(local):
            for round_steps in (steps[:2], steps[2:]):  # each run delivers two snapshots (few runs: each is seconds)
                for name in names:
                    for step in round_steps:
                        step(tables[name])
                        tables[name] = local.load(f"ns.{name}")
                    with Pipeline(configs[name]) as pipeline:
                        pipeline.run()
                messages = watch.messages()
                for name in names:
                    mine = [m for m in messages if m.subject == f"ns.{name}"]
                    assert bus.replay([m.body for m in mine]) == bus.table_rows(tables[name]), name
                    _check_each_snapshot(tables[name], mine)
    finally:
        watch.close()
    assert {m.properties["Icetail-Op"] for m in messages} == {"c", "d", "u"}
    for name in names:
        mine = [m for m in messages if m.subject == f"ns.{name}"]
        assert {m.message_id.split(":", 1)[0] for m in mine} == {f"{name}-rabbit"}
        ordinals = [int(m.properties["Icetail-Change-Ordinal"]) for m in mine]
        assert ordinals == sorted(ordinals)  # each table's messages in change-ordinal order


def test_serve_delivers_a_pattern_of_two_tables_onto_one_stream(stream: str, tmp_path: Path) -> None:
    """`icetail serve` with a namespace pattern whose tables share one stream (docs/sinks.md's YAML): both
    tables' changes arrive, each replaying to its rows, the table told by `subject`."""
    import yaml

    local = new_catalog(tmp_path / "cat", "rabbitserve")
    catalog = local.catalog()
    catalog.create_namespace("sales")
    names = ["orders_eu", "orders_us"]
    schema = bus.ARROW
    for n, name in enumerate(names):
        ids = list(range(n * 10, n * 10 + 5))
        catalog.create_table(f"sales.{name}", schema).append(pa.table({"id": ids, "v": ["a"] * 5}, schema=schema))
    catalog.create_table("sales.returns", schema).append(pa.table({"id": [99], "v": ["r"]}, schema=schema))
    port = free_port()
    config = tmp_path / "icetail.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "catalog": local.name,
                "state": f"sqlite:///{tmp_path / 'state.db'}",
                "interval": "0.5s",
                "metrics_host": "127.0.0.1",
                "metrics_port": port,
                "tables": [
                    {
                        "namespace": "sales",
                        "include": "orders_*",
                        "consumer": "sales-{table}",
                        "sink": _url(stream, "?create=true&key=id"),
                    }
                ],
            }
        )
    )
    _run(_admin("create", stream))
    watch = _StreamWatch(stream)
    env = child_env([local], tmp_path / "spark", extra={"ICETAIL_LOCAL_MAX_BYTES": str(1 << 30)})
    serve = Serve(["--config", str(config)], env=env, cwd=tmp_path, name="serve", port=port)

    def delivered() -> list[Read] | None:
        messages = watch.messages()
        for name in names:
            mine = [m for m in messages if m.subject == f"sales.{name}"]
            if bus.replay([m.body for m in mine]) != bus.table_rows(local.load(f"sales.{name}")):
                return None
        return messages

    try:
        wait_until(delivered, timeout=90, what="both tables delivered", child=serve, interval=0.5)
        local.load("sales.orders_us").delete("id = 11")  # a later commit, found by the next poll
        messages = wait_until(delivered, timeout=60, what="the delete delivered", child=serve, interval=0.5)
        serve.signal(signal.SIGTERM)
        assert serve.wait(60) == 0, serve.diagnostics()
    finally:
        serve.kill_group()
        watch.close()
    assert {m.subject for m in messages} == {"sales.orders_eu", "sales.orders_us"}  # not sales.returns
    assert {m.message_id.split(":", 1)[0] for m in messages} == {"sales-orders_eu", "sales-orders_us"}
    ids = [m.message_id for m in messages]
    assert len(set(ids)) == len(ids)
