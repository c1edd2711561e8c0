"""The bus sinks over TLS: the URL forms (`tls://` for NATS, `rediss-stream://`, `rabbitmq-stream+tls://`)
and their `ca=`, `cert=`, `key=` parameters; a NATS and a Redis server started by the test with TLS only
and client certificates required (a CA made at test time, tests/support/tls_servers.py), written to and
read back; a CA that did not sign the server's certificate refused in one line naming `ca=`. RabbitMQ's
TLS needs the broker reconfigured, which the shared broker is not: its URL and the SSL context built
from it are tested, not a connection. Skipped, saying why, without a server binary.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icetail.kernel.errors import ConfigError, SinkSetupError
from icetail.sinks.registry import check_sink_reachable, open_sink
from icetail.sinks.urls import parse_sink_url
from tests.sinks import CONSUMER, change_rows, key
from tests.support import bus_streams as bus
from tests.support.tls_servers import (
    Pki,
    Server,
    ServerNotStarted,
    make_pki,
    nats_tls_server,
    redis_tls_server,
    skip_reason,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography", reason="the cryptography package makes the test's CA")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Path:
    """A CA that signed nothing the servers hold."""
    return make_pki(tmp_path_factory.mktemp("other-pki"), "someone-else").ca


def _server(binary: str, start: Any, pki: Pki, folder: Path) -> Iterator[Server]:
    if reason := skip_reason(binary):
        pytest.skip(reason)
    try:
        server = start(pki, folder)
    except ServerNotStarted as exc:
        pytest.skip(f"{binary} would not start with TLS here: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def nats_tls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _server("nats-server", nats_tls_server, pki, tmp_path_factory.mktemp("nats"))


@pytest.fixture(scope="module")
def redis_tls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("redis")
    yield from _server("redis-server", redis_tls_server, pki, tmp_path_factory.mktemp("redis"))


def _files(pki: Pki, ca: Path | None = None) -> str:
    return f"ca={ca or pki.ca}&cert={pki.client_cert}&cert_key={pki.client_key}"


# URL forms: no server needed --------------------------------------------------------------


def test_the_tls_forms_are_parsed_without_a_password_and_their_files_left_out_of_the_identity() -> None:
    nats = parse_sink_url("tls://app:s3cret@nats.internal/cdc?stream=CDC&ca=/etc/ca.pem&cert=/c.pem&cert_key=/k.pem")
    assert nats.scheme == "nats" and nats.nats is not None and nats.nats.tls is not None
    assert nats.nats.server == "tls://app:s3cret@nats.internal:4222"
    assert (nats.nats.tls.ca, nats.nats.tls.cert, nats.nats.tls.key) == ("/etc/ca.pem", "/c.pem", "/k.pem")
    assert nats.normalized() == "tls://app@nats.internal:4222/cdc?stream=CDC"
    redis = parse_sink_url("rediss-stream://:s3cret@redis.internal/cdc:orders?ca=/etc/ca.pem")
    assert redis.scheme == "redis-stream" and redis.redis is not None and redis.redis.tls is not None
    assert redis.normalized() == "rediss-stream://redis.internal:6379/cdc:orders"
    rabbit = parse_sink_url("RABBITMQ-STREAM+TLS://app:s3cret@mq.internal/cdc-orders")
    assert rabbit.scheme == "rabbitmq-stream" and rabbit.rabbitmq is not None and rabbit.rabbitmq.tls is not None
    assert rabbit.rabbitmq.port == 5551  # the broker's stream.listeners.ssl
    assert rabbit.normalized() == "rabbitmq-stream+tls://app@mq.internal:5551/cdc-orders"
    assert rabbit.rabbitmq.tls.ca is None  # the system's CAs
    plain = parse_sink_url("nats://h/cdc?stream=S")
    assert plain.nats is not None and plain.nats.tls is None and plain.normalized() != nats.normalized()
    for target in (nats, redis, rabbit):
        assert "s3cret" not in repr(target) and "s3cret" not in target.normalized()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("nats://u:hunter22@h/cdc?stream=S&ca=/ca.pem", r"ca= is for TLS: use tls://"),
        ("redis-stream://u:hunter22@h/k?cert=/c.pem&cert_key=/k.pem", r"cert= is for TLS: use rediss-stream://"),
        ("rabbitmq-stream://u:hunter22@h/s?cert_key=/k.pem", r"cert_key= is for TLS: use rabbitmq-stream\+tls://"),
        ("tls://u:hunter22@h/cdc?stream=S&cert=/c.pem", "cert= and cert_key= go together"),
        ("rediss-stream://u:hunter22@h/k?ca=", "must name a file"),
        ("rabbitmq-stream+tls://u:hunter22@h/s?caa=/ca.pem", "did you mean ca?"),
    ],
)
def test_tls_parameters_out_of_place_are_refused_in_one_line(url: str, reason: str) -> None:
    bus.refused_in_one_line(url, reason, "hunter22")


def test_the_rabbitmq_tls_context_checks_the_broker_and_carries_the_client_certificate(pki: Pki) -> None:
    """What rstream is given for rabbitmq-stream+tls:// (the shared broker has no TLS listener to try it on)."""
    url = f"rabbitmq-stream+tls://u:hunter22@127.0.0.1/s?{_files(pki)}"
    target = parse_sink_url(url).rabbitmq
    assert target is not None and target.tls is not None
    context = target.tls.context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert "icetail-test CA" in [dict(n[0] for n in c["subject"]).get("commonName") for c in context.get_ca_certs()]
    with pytest.raises(ConfigError, match=r"ca=/nowhere/ca.pem: not a readable file .*fix ca=") as caught:
        parse_sink_url(url.replace(str(pki.ca), "/nowhere/ca.pem")).rabbitmq.tls.context()  # type: ignore[union-attr]
    assert "\n" not in str(caught.value) and "hunter22" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"not a readable PEM certificate and its key .*fix cert= and cert_key="):
        parse_sink_url(url.replace(str(pki.client_key), str(pki.ca))).rabbitmq.tls.context()  # type: ignore[union-attr]


# against servers started with TLS ----------------------------------------------------------


def test_nats_over_tls_with_a_client_certificate(nats_tls: Server, pki: Pki, other_ca: Path) -> None:
    stream = f"ICETAIL_TLS_{uuid.uuid4().hex[:8]}"
    url = f"tls://127.0.0.1:{nats_tls.port}/cdc?stream={stream}&create=true&key=id&{_files(pki)}"
    sink = open_sink(url, consumer=CONSUMER, table="ns.t")
    try:
        assert sink.write(key(0), change_rows([1, 2])) == f"{stream}:1-2"
    finally:
        sink.close()

    async def read() -> list[Any]:
        import nats

        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        nc = await nats.connect(f"tls://127.0.0.1:{nats_tls.port}", tls=context)
        try:
            js = nc.jetstream()
            return [await js.get_msg(stream, seq) for seq in (1, 2)]
        finally:
            await nc.close()

    assert [json.loads(m.data)["after"]["id"] for m in asyncio.run(read())] == [1, 2]
    wrong = url.replace(str(pki.ca), str(other_ca))
    with pytest.raises(SinkSetupError, match=r"NATS server .*certificate is not trusted .*ca=/path") as caught:
        check_sink_reachable(parse_sink_url(wrong))
    assert "\n" not in str(caught.value)
    plain = f"nats://127.0.0.1:{nats_tls.port}/cdc?stream={stream}"  # the server upgrades it to TLS
    with pytest.raises(SinkSetupError, match=r"not trusted .*: use tls://\.\.\. and give the CA .* as ca="):
        check_sink_reachable(parse_sink_url(plain))


def test_redis_over_tls_with_a_client_certificate(redis_tls: Server, pki: Pki, other_ca: Path) -> None:
    import redis

    url = f"rediss-stream://127.0.0.1:{redis_tls.port}/cdc?create=true&key=id&{_files(pki)}"
    sink = open_sink(url, consumer=CONSUMER, table="ns.t")
    try:
        sink.write(key(0), change_rows([1, 2]))
    finally:
        sink.close()
    client = redis.Redis(
        host="127.0.0.1", port=redis_tls.port, ssl=True, ssl_ca_certs=str(pki.ca),
        ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key),
    )  # fmt: skip
    entries = client.xrange("cdc")
    client.close()
    assert [json.loads(fields[b"envelope"])["after"]["id"] for _, fields in entries] == [1, 2]
    wrong = url.replace(str(pki.ca), str(other_ca))
    with pytest.raises(SinkSetupError, match=r"Redis server .*certificate is not trusted .*ca=/path") as caught:
        check_sink_reachable(parse_sink_url(wrong))
    assert "\n" not in str(caught.value)
