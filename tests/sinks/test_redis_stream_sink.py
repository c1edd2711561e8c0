"""The Redis stream sink against a real server (REDIS_URL, default redis://127.0.0.1:6379): URL parsing,
entries and their fields, a replayed chunk (whole, or cut midway by the server going away) stored
once, a batch behind the consumer's mark refused, the refusals (missing or wrong-typed key,
unreachable server, wrong password, an envelope over the limit), pipeline runs of two tables onto
one stream that replay to each table's rows, and `icetail run` SIGKILLed at seeded moments.
Skipped, saying why, without a reachable server. Every test uses keys of its own and deletes them.
"""

from __future__ import annotations

import json
import os
import random
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, SinkSetupError, TransientError
from icetail.kernel.model import ChangeType
from icetail.sinks.redis import sink as redis_sink
from icetail.sinks.redis.script import marks_key
from icetail.sinks.registry import check_sink_reachable, open_sink
from icetail.sinks.urls import parse_sink_url
from tests.sinks import CONSUMER, change_rows, key
from tests.support import bus_streams as bus
from tests.support.catalogs import catalogs_in_process, new_catalog
from tests.support.crash import Attempt, KillTrigger, crash_loop
from tests.support.partition_proxy import PartitionProxy
from tests.support.processes import child_env, icetail_command
from tests.support.stores import view_state

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
_PARTS = urlsplit(REDIS_URL)
HOST, PORT = _PARTS.hostname or "127.0.0.1", _PARTS.port or 6379
SERVER = f"{HOST}:{PORT}"
SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261204"))


def _unreachable() -> str | None:
    return bus.unreachable("redis", "redis", HOST, PORT, "Redis server", "start one with `redis-server`")


def _client() -> Any:
    import redis

    return redis.Redis(host=HOST, port=PORT)


@pytest.fixture
def stream() -> Iterator[str]:
    """A fresh stream key (not created); it and its marks deleted at teardown."""
    if reason := _unreachable():
        pytest.skip(reason)
    name = f"icetail-test:{uuid.uuid4().hex[:10]}"
    yield name
    _client().delete(name, marks_key(name))


def _url(stream: str, query: str = "?create=true", server: str = SERVER) -> str:
    return f"redis-stream://{server}/{stream}{query}"


def _read(stream: str) -> list[tuple[str, dict[str, str]]]:
    return [(i.decode(), {k.decode(): v.decode() for k, v in fields.items()}) for i, fields in _client().xrange(stream)]


def _envelopes(entries: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [json.loads(fields["envelope"]) for fields in entries]


# URL parsing: no server needed -------------------------------------------------------


def test_the_url_is_parsed_once_without_a_password() -> None:
    target = parse_sink_url("redis-stream://app:s3cret@redis.internal/cdc:orders?create=true&key=id,region&maxlen=5000")
    assert target.scheme == "redis-stream" and target.redis is not None
    assert (target.redis.host, target.redis.port, target.redis.stream) == ("redis.internal", 6379, "cdc:orders")
    assert (target.redis.username, target.redis.password, target.redis.create) == ("app", "s3cret", True)
    assert (target.redis.key, target.redis.maxlen) == (("id", "region"), 5000)
    assert target.normalized() == "redis-stream://app@redis.internal:6379/cdc:orders?key=id,region&maxlen=5000"
    assert "s3cret" not in repr(target) and "s3cret" not in repr(target.redis)
    same = parse_sink_url("REDIS-STREAM://app:other@redis.internal:6379/cdc:orders?maxlen=5000&key=id,region")
    assert same.normalized() == target.normalized()  # create= is not where the changes go
    only_password = parse_sink_url("redis-stream://:hunter22@h:6380/k?db=2")
    assert only_password.normalized() == "redis-stream://h:6380/k?db=2"
    assert only_password.redis is not None and only_password.redis.password == "hunter22"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis-stream://h:6379/", "it names no stream key"),
        ("redis-stream://h:6379/a/b", "one path segment"),
        ("redis-stream://h:6379/k?creat=true", "did you mean create?"),
        ("redis-stream://h:6379/k?create=maybe", "must be true or false"),
        ("redis-stream://h:6379/k?maxlen=10", "at least 1000"),
        ("redis-stream://h:6379/k?db=x", "whole number"),
        ("redis-stream://h:6379/k?key=id,,x", "must name columns"),
        ("redis-stream://h:port/k", "not usable"),
        ("redis-stream://u:hunter22@h/k?db=1&db=2", "more than once"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, reason: str) -> None:
    bus.refused_in_one_line(url, reason, "hunter22")


def test_parsing_imports_no_driver() -> None:
    assert bus.modules_after_parsing("redis-stream://h/k", ["redis", "pyarrow"]) == [False, False]


# against the server --------------------------------------------------------------------


def test_entries_carry_the_envelope_and_a_replayed_chunk_is_stored_once(stream: str) -> None:
    sink = open_sink(_url(stream, "?create=true&key=id"), consumer=CONSUMER, table="ns.orders")
    try:
        rows = change_rows([1, 2, 3])
        sink.write(key(0, 100), rows)
        assert sink.write(key(0, 100), rows) == f"{stream}:held"  # the crash between write and commit, replayed
        update = pa.concat_tables(
            [
                change_rows([2], change_type=ChangeType.UPDATE_BEFORE),
                change_rows([2], change_type=ChangeType.UPDATE_AFTER),
            ]
        )
        sink.write(key(1, 0), pa.concat_tables([update, change_rows([4])]))  # an update is one entry
        sink.write(key(0, 100), rows)  # a zombie's late copy of an earlier chunk of the batch
        assert sink.inner.duplicates == 6  # type: ignore[attr-defined]
    finally:
        sink.close()
    entries = _read(stream)
    assert len(entries) == 5
    ids = [i for i, _ in entries]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    first = entries[0][1]
    assert {k: v for k, v in first.items() if k != "envelope"} == {
        "op": "c",
        "table": "ns.orders",
        "snapshot_id": "1001",
        "change_ordinal": "0",
        "key": "[1]",
        "consumer": CONSUMER,
        "position": f"{key(0).batch_id}:0:100:0",
    }
    record = json.loads(first["envelope"])
    assert record["after"] == {"id": 1, "name": "n1"} and record["op"] == "c" and record["before"] is None
    assert [f["key"] for _, f in entries] == ["[1]", "[2]", "[3]", "[2]", "[4]"]  # per key in order
    assert [f["op"] for _, f in entries[3:]] == ["u", "c"]


def test_a_chunk_cut_midway_by_the_server_going_away_is_completed_once(
    stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_sink, "PIECE_ENTRIES", 4)
    rows = change_rows(list(range(20)))
    with PartitionProxy(HOST, PORT) as proxy:
        sink = open_sink(_url(stream, server=f"127.0.0.1:{proxy.port}"), consumer=CONSUMER, table="ns.t")
        whole = redis_sink.pieces

        def going_away(batch: Any) -> Iterator[Any]:
            for n, piece in enumerate(whole(batch)):
                if n == 2:
                    proxy.close()  # the server goes away after two pieces landed
                yield piece

        monkeypatch.setattr(redis_sink, "pieces", going_away)
        with pytest.raises(SinkError, match=r"cannot be reached .*start it") as caught:
            sink.write(key(0), rows)
        assert "\n" not in str(caught.value) and isinstance(caught.value, TransientError)
        sink.close()
    assert len(_read(stream)) == 8
    monkeypatch.setattr(redis_sink, "pieces", whole)
    again = open_sink(_url(stream), consumer=CONSUMER, table="ns.t")  # the run after: the chunk replayed
    try:
        again.write(key(0), rows)
        again.write(key(0, 20), change_rows([20]))
    finally:
        again.close()
    positions = [f["position"].rsplit(":", 3)[1:] for _, f in _read(stream)]
    assert positions == [["0", "0", str(i)] for i in range(20)] + [["0", "20", "0"]]


def test_a_batch_behind_the_consumers_mark_is_refused(stream: str) -> None:
    sink = open_sink(_url(stream), consumer=CONSUMER, table="ns.t")
    try:
        sink.write(key(0, batch_id="b000007-aaaaaaaa-c0"), change_rows([1]))
        sink.write(key(0, batch_id="b000009-bbbbbbbb-c0"), change_rows([2]))  # a later batch, or after a reset
        with pytest.raises(SinkError, match=r"already holds this consumer's later batch b000009-bbbbbbbb-c0.*HDEL"):
            sink.write(key(0, batch_id="b000001-cccccccc-c0"), change_rows([3]))  # the consumer re-created
        with pytest.raises(SinkError, match="later batch"):
            sink.write(key(0, batch_id="b000009-dddddddd-c0"), change_rows([3]))
        other = open_sink(_url(stream), consumer="other-table", table="ns.u")  # another consumer, same stream
        other.write(key(0, consumer="other-table", batch_id="b000001-eeeeeeee-c0"), change_rows([4]))
        other.close()
    finally:
        sink.close()
    assert [f["consumer"] for _, f in _read(stream)] == [CONSUMER, CONSUMER, "other-table"]


def test_a_missing_or_wrong_typed_key_is_refused_naming_the_fix(stream: str) -> None:
    url = _url(stream, "")
    with pytest.raises(ConfigError, match=f"stream '{stream}' does not exist.*add \\?create=true") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="does not exist"):
        open_sink(url, consumer=CONSUMER)
    check_sink_reachable(parse_sink_url(url + "?create=true"))  # reaching creates nothing ...
    assert not _client().exists(stream)
    _client().set(stream, "a string")
    with pytest.raises(ConfigError, match="holds a string, not a stream"):
        open_sink(url, consumer=CONSUMER)


def test_an_unreachable_server_is_a_transient_error_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"redis-stream://127.0.0.1:{port}/k"
    with pytest.raises(SinkError, match=rf"Redis server 127.0.0.1:{port} cannot be reached .*start it") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value) and isinstance(caught.value, TransientError)
    with pytest.raises(SinkError, match="cannot be reached"):
        open_sink(url, consumer=CONSUMER)


def test_wrong_credentials_are_refused_without_showing_the_password(stream: str) -> None:
    user = f"icetail-test-{uuid.uuid4().hex[:6]}"
    client = _client()
    client.execute_command("ACL", "SETUSER", user, "on", ">right-password", f"~{stream}*", f"~{{{stream}}}*", "+@all")
    try:
        url = _url(stream, server=f"{user}:wrong-password@{SERVER}")
        with pytest.raises(SinkSetupError, match=r"refused the sink's credentials.*fix USER:PASSWORD") as caught:
            open_sink(url, consumer=CONSUMER)
        assert "\n" not in str(caught.value) and "wrong-password" not in str(caught.value)
        sink = open_sink(_url(stream, server=f"{user}:right-password@{SERVER}"), consumer=CONSUMER, table="ns.t")
        try:
            sink.write(key(0), change_rows([1]))
        finally:
            sink.close()
        assert len(_read(stream)) == 1
    finally:
        client.execute_command("ACL", "DELUSER", user)


def test_an_envelope_over_the_limit_is_refused_naming_the_fix(stream: str) -> None:
    sink = open_sink(_url(stream, "?create=true&max_message_bytes=2048"), consumer=CONSUMER, table="ns.t")
    try:
        big = change_rows([1], extra={"blob": pa.array(["x" * 4096])})
        with pytest.raises(SinkRejectedError, match="over the 2048 bytes .*raise max_message_bytes=") as caught:
            sink.write(key(0), big)
        assert "\n" not in str(caught.value)
        sink.write(key(0, 1), change_rows([2]))  # the sink still works
    finally:
        sink.close()
    assert len(_read(stream)) == 1


def test_a_chunk_cut_inside_a_piece_is_completed_once_and_fields_that_vary_are_sent_per_entry(
    stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script skips the entries at or before the mark inside a piece (a chunk cut off by an XADD
    that failed midway); snapshot ids and keys that differ between entries go one per entry, line
    breaks and non-ASCII text in them escaped or kept as the jsonl encoding and json.dumps write them."""
    monkeypatch.setattr(redis_sink, "PIECE_ENTRIES", 4)
    notes = ["a\nb", "é", "tab\there", "x", "y"]
    rows = pa.concat_tables(
        [
            change_rows([0, 1, 2, 3, 4], snapshot_id=1001, extra={"note": pa.array(notes)}),
            change_rows([5, 6, 7, 8, 9], snapshot_id=1002, extra={"note": pa.array(notes)}),
        ]
    )
    sink = open_sink(_url(stream, "?create=true&key=note"), consumer=CONSUMER, table="ns.t")
    try:
        sink.write(key(0, 7), rows.slice(0, 6))  # what landed of the chunk before the failure
        sink.write(key(0, 7), rows)  # its replay: pieces 0-3 (held), 4-7 (4 and 5 held), 8-9
        assert sink.inner.duplicates == 6  # type: ignore[attr-defined]
    finally:
        sink.close()
    fields = [f for _, f in _read(stream)]
    assert [f["position"].rsplit(":", 3)[1:] for f in fields] == [["0", "7", str(i)] for i in range(10)]
    assert [f["snapshot_id"] for f in fields] == ["1001"] * 5 + ["1002"] * 5
    assert [json.loads(f["key"]) for f in fields] == [[n] for n in notes] * 2
    assert fields[0]["key"] == '["a\\nb"]' and fields[1]["key"] == '["é"]'
    assert [json.loads(f["envelope"])["after"]["note"] for f in fields] == notes * 2
    assert [f["table"] for f in fields] == ["ns.t"] * 10


def test_entries_send_a_table_per_entry_only_when_a_chunk_has_several() -> None:
    from icetail.sinks.debezium import EnvelopeSource, envelopes
    from icetail.sinks.redis.entries import entries

    def chunk(*tables: str) -> pa.Table:
        return pa.concat_tables([envelopes(change_rows([i]), EnvelopeSource(t, {})) for i, t in enumerate(tables)])

    one = entries(key(0), chunk("ns.a\nb", "ns.a\nb"))  # one table: sent once, whatever its name holds
    assert one is not None and one.columns[1].one == b"ns.a\nb"
    several = entries(key(0), chunk("ns.a", "ns.b", "ns.a"))
    assert several is not None and several.columns[1].one is None
    assert [dict(several.fields(i))["table"] for i in range(3)] == [b"ns.a", b"ns.b", b"ns.a"]
    with pytest.raises(SinkRejectedError, match="a table with a line break in a chunk of several tables") as caught:
        entries(key(0), chunk("ns.a\nb", "ns.c"))
    assert "\n" not in str(caught.value)


# pipeline runs -------------------------------------------------------------------------


def test_two_tables_onto_one_stream_replay_to_each_tables_rows(
    stream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    monkeypatch.setenv("ICETAIL_LOCAL_MAX_BYTES", str(1 << 30))  # the in-process engine: no Spark needed
    local = new_catalog(tmp_path / "cat", "rediscat")
    names = ["orders", "refunds"]
    tables = dict(zip(names, bus.id_v_tables(local, names), strict=True))
    configs = {
        name: PipelineConfig(
            "rediscat", f"ns.{name}", f"sqlite:///{tmp_path}/state.db", _url(stream, "?create=true&key=id"),
            consumer=f"{name}-redis", chunk_rows=2,
        )
        for name in names
    }  # fmt: skip
    steps = [
        lambda t: t.append(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}, schema=bus.ARROW)),
        lambda t: t.delete("id = 2"),
        lambda t: t.upsert(pa.table({"id": [3, 5], "v": ["c2", "e"]}, schema=bus.ARROW)),
    ]
    with catalogs_in_process(local):
        for step in steps:
            for name in names:
                step(tables[name])
                tables[name] = local.load(f"ns.{name}")
                with Pipeline(configs[name]) as pipeline:
                    pipeline.run()
            entries = [f for _, f in _read(stream)]
            for name in names:
                mine = _envelopes([f for f in entries if f["table"] == f"ns.{name}"])
                assert bus.replay(mine) == bus.table_rows(tables[name])
                bus.check_each_snapshot(tables[name], mine)
    assert {"c", "d"} <= {f["op"] for f in entries}
    positions = [(f["consumer"], f["position"]) for f in entries]
    assert len(set(positions)) == len(positions)
    for name in names:
        ordinals = [int(f["change_ordinal"]) for f in entries if f["table"] == f"ns.{name}"]
        assert ordinals == sorted(ordinals)  # each table's entries in change-ordinal order


class _StreamSpec:
    """The stream as crash_loop watches it: `written` counts entries, `read` the entries' positions."""

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def probe(self, kind: str) -> int:
        return int(_client().xlen(self.stream))

    def read(self) -> pa.Table | None:
        entries = [f for _, f in _read(self.stream)]
        return pa.table({"position": [f["position"] for f in entries], "envelope": [f["envelope"] for f in entries]})


def test_sigkill_delivers_every_change_once(stream: str, tmp_path: Path) -> None:
    local = new_catalog(tmp_path / "cat", "rediscrash")
    (table,) = bus.id_v_tables(local, ["events"])
    rng = random.Random(f"{SEED}:redis")
    ids = list(range(1, 121))
    table.append(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=bus.ARROW))
    table = local.load("ns.events")
    table.delete("id <= 30")
    table = local.load("ns.events")
    table.upsert(pa.table({"id": [40, 50, 200], "v": ["x", "y", "z"]}, schema=bus.ARROW))
    table = local.load("ns.events")
    table.append(pa.table({"id": list(range(300, 380)), "v": ["w"] * 80}, schema=bus.ARROW))
    table = local.load("ns.events")
    state_url = f"sqlite:///{tmp_path}/state.db"
    consumer = "events-redis"
    env = child_env([local], tmp_path / "spark", extra={"ICETAIL_LOCAL_MAX_BYTES": str(1 << 30)})
    cmd = [
        *icetail_command(), "run", "--catalog", local.name, "--table", "ns.events", "--state", state_url,
        "--sink", _url(stream, "?create=true&key=id"), "--consumer", consumer, "--until-caught-up",
        "--max-snapshots-per-batch", "1", "--chunk-rows", "10",
    ]  # fmt: skip
    # keyed to sink writes first: a run in process can end before any moment set by the clock (the
    # first batch alone is 12 chunks, so the first kill always lands); the start-up kill last, where
    # a run that finished before it only ends the loop after the kills that landed
    schedule = [
        KillTrigger("written", rng.uniform(0.0, 0.003), rng.randint(1, 10)),
        KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(1, 8)),
        KillTrigger("written", rng.uniform(0.0, 0.01), rng.randint(1, 6)),
        KillTrigger("time", rng.uniform(0.2, 1.2)),
    ]

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        assert rows is not None
        positions = rows.column("position").to_pylist()
        assert len(set(positions)) == len(positions), f"an entry twice after run {attempt.index}"
        bus.replay(json.loads(e) for e in rows.column("envelope").to_pylist())  # no change of a missing row

    report = crash_loop(
        cmd, env, state_url=state_url, consumer=consumer, sink=_StreamSpec(stream),  # type: ignore[arg-type]
        schedule=schedule, logs=tmp_path / "logs", check=check, timeout=60, final_timeout=120,
    )  # fmt: skip
    summary = f"seed {SEED}\n{report.summary()}"
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    assert report.kills >= 1, summary
    assert view_state(state_url, consumer).cursor == table.metadata.current_snapshot_id, summary
    envelopes = _envelopes([f for _, f in _read(stream)])
    assert bus.replay(envelopes) == bus.table_rows(table), summary
    bus.check_each_snapshot(table, envelopes)
