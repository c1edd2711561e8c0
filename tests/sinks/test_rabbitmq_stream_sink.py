"""The RabbitMQ Streams sink against a real broker (RABBITMQ_STREAM_URL, default
rabbitmq-stream://guest:guest@127.0.0.1:5552, the stream plugin on): URL parsing, the envelope and its
properties, a replayed chunk stored once, the refusals (missing stream, unreachable port, wrong
credentials, a message over the frame size), and a connection lost mid-chunk then replayed.
Each test's stream is new and deleted after. Skipped, saying why, without a reachable broker.
"""

from __future__ import annotations

import asyncio
import json
import os
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
from tests.support.partition_proxy import PartitionProxy

BROKER_URL = os.environ.get("RABBITMQ_STREAM_URL", "rabbitmq-stream://guest:guest@127.0.0.1:5552")
_PARTS = urlsplit(BROKER_URL)
HOST, PORT = _PARTS.hostname or "127.0.0.1", _PARTS.port or 5552
USER, PASSWORD = _PARTS.username or "guest", _PARTS.password or "guest"
SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261204"))


def _unreachable() -> str | None:
    try:
        import rstream  # noqa: F401
    except ImportError:
        return "rstream is not installed (pip install 'icetail[rabbitmq]')"
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            return None
    except OSError as exc:
        return f"no RabbitMQ stream port at {HOST}:{PORT} ({exc}); rabbitmq-plugins enable rabbitmq_stream"


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
        body = b"".join(message.body) if isinstance(message.body, list) else bytes(message.body)
        if body == marker:
            if not done.done():
                done.set_result(None)
            return
        props = {_text(k): _text(v) for k, v in (message.application_properties or {}).items()}
        p = message.properties
        got.append(Read(json.loads(body), props, _text(p.message_id), _text(p.subject)))

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
    with pytest.raises(ConfigError, match=reason) as caught:
        parse_sink_url(url)
    assert "\n" not in str(caught.value) and "hunter22" not in str(caught.value)


def test_parsing_imports_no_driver() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from icetail.sinks.urls import parse_sink_url; "
        "parse_sink_url('rabbitmq-stream://h/s'); print('rstream' in sys.modules, 'pyarrow' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]


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
    replay = open_sink(_url(stream, "?key=id"), consumer=CONSUMER, table="ns.orders")
    try:
        replay.write(key(0, 100), change_rows([1, 2, 3]))
    finally:
        replay.close()
    messages = _run(_read_all(stream))
    assert len(messages) == 5
    first_message = messages[0]
    assert first_message.subject == "ns.orders"
    assert first_message.message_id == f"{CONSUMER}:1001:0:{key(0).batch_id}:0:100"
    assert first_message.properties == {
        "Icetail-Op": "c",
        "Icetail-Table": "ns.orders",
        "Icetail-Snapshot-Id": "1001",
        "Icetail-Change-Ordinal": "0",
        "Icetail-Key": "[1]",
    }
    assert first_message.body["after"] == {"id": 1, "name": "n1"} and first_message.body["before"] is None
    assert [m.message_id.rsplit(":", 2)[1:] for m in messages] == [["0", "100"], ["0", "101"], ["0", "102"],
                                                                   ["1", "0"], ["1", "2"]]  # fmt: skip
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


async def _cut_once_stored(stream: str, producer: str, proxy: PartitionProxy, started: threading.Event) -> None:
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
    count = 30_000
    rows = change_rows(list(range(count)), extra={"pad": pa.array(["p" * 100] * count)})
    chunk = key(0, 0)
    with PartitionProxy(HOST, PORT) as proxy:
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
