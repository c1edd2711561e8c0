"""The NATS JetStream sink against a real server (NATS_URL, default nats://127.0.0.1:4222, with
JetStream): URL parsing, a pipeline run whose stream replays to the table's rows, a replayed chunk
stored once, and the refusals (missing stream, short duplicate window, unreachable server,
a message over the server's max payload); on Spark, a snapshot reconciled (and a `--net` batch
folded) in partitions stored whole; `icetail run` SIGKILLed at seeded moments (ICETAIL_CRASH_SEED),
on the in-process engine and on Spark. Skipped, saying why, without a reachable server.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError, TerminalError, TransientError
from icetail.kernel.model import ChangeType
from icetail.sinks.registry import check_sink_reachable, open_sink
from icetail.sinks.urls import parse_sink_url
from tests.sinks import CONSUMER, change_rows, key
from tests.support import bus_streams as bus
from tests.support.catalogs import LocalCatalog, catalogs_in_process, new_catalog
from tests.support.crash import Attempt, KillTrigger, crash_loop
from tests.support.processes import child_env, icetail_command
from tests.support.stores import view_state

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
_PARTS = urlsplit(NATS_URL)
SERVER = f"{_PARTS.hostname}:{_PARTS.port or 4222}"
SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261204"))


def _unreachable() -> str | None:
    host, port = _PARTS.hostname or "127.0.0.1", _PARTS.port or 4222
    return bus.unreachable("nats", "nats", host, port, "NATS server", "start one with `nats-server -js`")


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _admin(action: str, name: str, **config: Any) -> Any:
    import nats
    from nats.js.api import StreamConfig

    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        if action == "add":
            return await js.add_stream(StreamConfig(name=name, **config))
        if action == "delete":
            try:
                return await js.delete_stream(name)
            except Exception:
                return None
        if action == "info":
            return await js.stream_info(name)
        assert action == "read"
        return await _messages(js, name)
    finally:
        await nc.close()


async def _messages(js: Any, name: str) -> list[Any]:
    """Every message of stream `name`, in stream order ([] before the first run creates it)."""
    from nats.js.errors import NotFoundError

    try:
        info = await js.stream_info(name)
    except NotFoundError:
        return []
    if not info.state.messages:
        return []
    return [await js.get_msg(name, seq) for seq in range(info.state.first_seq, info.state.last_seq + 1)]


@pytest.fixture
def stream() -> Iterator[str]:
    """A fresh stream name (not created), deleted at teardown."""
    if reason := _unreachable():
        pytest.skip(reason)
    name = f"ICETAIL_TEST_{uuid.uuid4().hex[:10]}"
    yield name
    _run(_admin("delete", name))


def _url(stream: str, prefix: str = "cdc", query: str = "&create=true") -> str:
    return f"nats://{SERVER}/{prefix}?stream={stream}{query}"


# URL parsing: no server needed -------------------------------------------------------


def test_the_url_is_parsed_once_without_a_password() -> None:
    target = parse_sink_url("nats://app:s3cret@nats.internal/cdc.prod?stream=CDC&create=true&key=id,region")
    assert target.scheme == "nats" and target.nats is not None
    assert target.nats.server == "nats://app:s3cret@nats.internal:4222"
    assert (target.nats.subject_prefix, target.nats.stream, target.nats.create) == ("cdc.prod", "CDC", True)
    assert target.nats.key == ("id", "region")
    assert target.normalized() == "nats://app@nats.internal:4222/cdc.prod?stream=CDC&key=id,region"
    assert "s3cret" not in repr(target) and "s3cret" not in repr(target.nats)
    # create= is not where the changes go: the same sink with or without it
    same = parse_sink_url("NATS://app:other@nats.internal:4222/cdc.prod?key=id,region&stream=CDC")
    assert same.normalized() == target.normalized()
    token = parse_sink_url("nats://t0ken@h:4333/p?stream=S")
    assert token.normalized() == "nats://h:4333/p?stream=S"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("nats://h:4222/cdc", "it names no stream"),
        ("nats://h:4222/?stream=S", "it names no subject prefix"),
        ("nats://h:4222/cdc.*?stream=S", "subject prefix"),
        ("nats://h:4222/a..b?stream=S", "subject prefix"),
        ("nats://h:4222/cdc?stream=a.b", "is not a JetStream stream name"),
        ("nats://h:4222/cdc?stream=S&streem=T", "did you mean stream?"),
        ("nats://h:4222/cdc?stream=S&create=maybe", "must be true or false"),
        ("nats://h:4222/cdc?stream=S&key=id,,x", "must name columns"),
        ("nats://h:port/cdc?stream=S", "not usable"),
        ("nats://u:hunter22@h/cdc?stream=S&stream=T", "more than once"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, reason: str) -> None:
    bus.refused_in_one_line(url, reason, "hunter22")


def test_a_token_in_a_refused_url_is_not_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sink_url("nats://supersecrettoken@h/cdc")
    assert "supersecrettoken" not in str(caught.value)


def test_parsing_imports_no_driver() -> None:
    assert bus.modules_after_parsing("nats://h/p?stream=S", ["nats", "pyarrow"]) == [False, False]


# against the server --------------------------------------------------------------------


def test_a_replayed_chunk_is_stored_once(stream: str) -> None:
    sink = open_sink(_url(stream, query="&create=true&key=id"), consumer=CONSUMER, table="ns.orders")
    try:
        rows = change_rows([1, 2, 3])
        first = sink.write(key(0, 100), rows)
        again = sink.write(key(0, 100), rows)  # the crash between the write and the offset commit, replayed
        assert first == again == f"{stream}:1-3"
        update = pa.concat_tables(
            [
                change_rows([2], change_type=ChangeType.UPDATE_BEFORE),
                change_rows([2], change_type=ChangeType.UPDATE_AFTER),
            ]
        )
        sink.write(key(1, 0), pa.concat_tables([update, change_rows([4])]))  # an update is one record of two rows
    finally:
        sink.close()
    messages = _run(_admin("read", stream))
    assert len(messages) == 5
    first_message = messages[0]
    assert first_message.subject == "cdc.ns.orders.1"
    headers = first_message.headers
    assert headers["Nats-Msg-Id"] == f"{CONSUMER}:1001:0:{key(0).batch_id}:0:100:0"
    assert (headers["Icetail-Op"], headers["Icetail-Table"], headers["Icetail-Snapshot-Id"]) == (
        "c",
        "ns.orders",
        "1001",
    )
    assert (headers["Icetail-Change-Ordinal"], headers["Icetail-Key"]) == ("0", "[1]")
    record = json.loads(first_message.data)
    assert record["after"] == {"id": 1, "name": "n1"} and record["op"] == "c" and record["before"] is None
    assert [m.headers["Nats-Msg-Id"].split(":", 4)[4] for m in messages] == [
        "0:100:0", "0:100:1", "0:100:2", "1:0:0", "1:0:1",
    ]  # fmt: skip
    assert [m.headers["Icetail-Op"] for m in messages[3:]] == ["u", "c"]


def test_a_missing_stream_is_refused_naming_the_fix(stream: str) -> None:
    url = _url(stream, query="")
    with pytest.raises(ConfigError, match=f"stream '{stream}' does not exist.*add &create=true") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="does not exist"):
        open_sink(url, consumer=CONSUMER)
    check_sink_reachable(parse_sink_url(url + "&create=true"))  # reaching creates nothing ...
    with pytest.raises(ConfigError, match="does not exist"):
        check_sink_reachable(parse_sink_url(url))  # ... as this shows


def test_a_short_duplicate_window_and_foreign_subjects_are_refused(stream: str) -> None:
    _run(_admin("add", stream, subjects=["cdc.>"], duplicate_window=30.0))
    with pytest.raises(ConfigError, match=r"duplicate window of 30s.*--dupe-window 5m") as caught:
        open_sink(_url(stream, query=""), consumer=CONSUMER)
    assert "\n" not in str(caught.value) and isinstance(caught.value, TerminalError)
    with pytest.raises(ConfigError, match=r"takes subjects cdc.>, not other.>: .*--subjects 'other.>'"):
        open_sink(_url(stream, prefix="other", query=""), consumer=CONSUMER)


def test_an_unreachable_server_is_a_transient_error_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"nats://127.0.0.1:{port}/cdc?stream=S"
    with pytest.raises(SinkError, match=rf"NATS server 127.0.0.1:{port} cannot be reached .*start it") as caught:
        check_sink_reachable(parse_sink_url(url))
    assert "\n" not in str(caught.value) and isinstance(caught.value, TransientError)
    with pytest.raises(SinkError, match="cannot be reached"):
        open_sink(url, consumer=CONSUMER)


def test_a_message_over_the_max_payload_is_refused_naming_the_fix(stream: str) -> None:
    _run(_admin("add", stream, subjects=["cdc.>"], duplicate_window=120.0, max_msg_size=2048))
    sink = open_sink(_url(stream, query=""), consumer=CONSUMER, table="ns.t")
    try:
        big = change_rows([1], extra={"blob": pa.array(["x" * 4096])})
        with pytest.raises(SinkRejectedError, match="larger than .*max_payload.*max-msg-size") as caught:
            sink.write(key(0), big)
        assert "\n" not in str(caught.value)
        assert sink.write(key(0, 1), change_rows([2])) == f"{stream}:1-1"  # the sink still works
    finally:
        sink.close()


# a pipeline run --------------------------------------------------------------------------


def test_a_pipeline_run_replays_to_the_tables_rows(
    stream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    monkeypatch.setenv("ICETAIL_LOCAL_MAX_BYTES", str(1 << 30))  # the in-process engine: no Spark needed
    local = new_catalog(tmp_path / "cat", "natscat")
    (table,) = bus.id_v_tables(local, ["orders"])
    config = PipelineConfig(
        "natscat", "ns.orders", f"sqlite:///{tmp_path}/state.db", _url(stream, query="&create=true&key=id"),
        consumer="orders-nats",
    )  # fmt: skip
    steps = [
        lambda t: t.append(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}, schema=bus.ARROW)),
        lambda t: t.delete("id = 2"),
        lambda t: t.upsert(pa.table({"id": [3, 5], "v": ["c2", "e"]}, schema=bus.ARROW)),
        lambda t: t.append(pa.table({"id": [6], "v": ["f"]}, schema=bus.ARROW)),
    ]
    with catalogs_in_process(local):
        for step in steps:
            step(table)
            table = local.load("ns.orders")
            with Pipeline(config) as pipeline:
                pipeline.run()
            messages = _run(_admin("read", stream))
            records = [json.loads(m.data) for m in messages]
            assert bus.replay(records) == bus.table_rows(table)
            bus.check_each_snapshot(table, records)
    assert {"c", "d"} <= {r["op"] for r in records}  # pyiceberg's upsert commits a delete, then an append
    ids = [m.headers["Nats-Msg-Id"] for m in messages]
    assert len(set(ids)) == len(ids)
    assert all(m.subject == f"cdc.ns.orders.{m.headers['Icetail-Key'][1:-1]}" for m in messages)
    ordinals = [int(m.headers["Icetail-Change-Ordinal"]) for m in messages]
    assert ordinals == sorted(ordinals)  # in change-ordinal order


@pytest.mark.parametrize("net", [False, True], ids=["reconciled", "net"])
def test_chunks_of_a_snapshot_in_partitions_are_stored_whole(
    stream: str, tmp_path: Path, spark: Any, net: bool
) -> None:
    """A copy-on-write delete reconciled (or, with `--net`, folded) by Spark tasks in partitions: each
    partition is a chunk keyed by the partition's index, not a row offset. Every change is stored
    once: no message of one partition is taken for a copy of another's."""
    from pyiceberg.expressions import In

    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    local = new_catalog(tmp_path / "cat", "natsparts")
    catalog = local.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", bus.ARROW, properties={"write.delete.mode": "copy-on-write"})
    for f in range(3):  # a file of 400 rows each
        ids = list(range(f * 400, (f + 1) * 400))
        table.append(pa.table({"id": ids, "v": [f"v{i}-{'x' * (i % 9)}" for i in ids]}, schema=bus.ARROW))
    config = PipelineConfig(
        "natsparts", "ns.t", f"sqlite:///{tmp_path}/state.db", _url(stream), consumer="parts-nats",
        reconcile_partition_bytes=2_000, net=net, identifier_columns=("id",),
    )  # fmt: skip
    deleted = [i for i in range(1200) if i % 10 == 3]
    with catalogs_in_process(local):
        with Pipeline(config, spark=spark) as pipeline:
            pipeline.run()
        table = catalog.load_table("ns.t")
        table.delete(In("id", deleted))  # rewrites every file: 1,080 carry-overs, 120 deletes
        table = catalog.load_table("ns.t")
        with Pipeline(config, spark=spark) as pipeline:
            pipeline.run()
    messages = _run(_admin("read", stream))
    records = [json.loads(m.data) for m in messages]
    ops = Counter(r["op"] for r in records)
    assert ops == {"c": 1200, "d": len(deleted)}, ops
    assert bus.replay(records) == bus.table_rows(table)
    ids = [m.headers["Nats-Msg-Id"] for m in messages]
    assert len(set(ids)) == len(ids)
    deletes = [m.headers["Nats-Msg-Id"].split(":") for m in messages if m.headers["Icetail-Op"] == "d"]
    assert len({tuple(parts[4:6]) for parts in deletes}) >= 3  # the delete went out in 3 partitions or more
    ordinals = [int(m.headers["Icetail-Change-Ordinal"]) for m in messages]
    by_key: dict[int, list[int]] = {}
    for record, ordinal in zip(records, ordinals, strict=True):
        by_key.setdefault((record["after"] or record["before"])["id"], []).append(ordinal)
    assert all(o == sorted(o) for o in by_key.values())  # each key's changes in change-ordinal order
    # across keys, a batch folded in partitions comes partition after partition
    assert (ordinals == sorted(ordinals)) is not net


# `icetail run` SIGKILLed at seeded moments ------------------------------------------------


class _StreamWatch:
    """The stream as crash_loop watches it, on one connection: `probe` counts its messages (both
    kinds: a message lands as its publish is stored), `read` returns their ids and envelopes."""

    def __init__(self, stream: str) -> None:
        from icetail.sinks.bus.loop import AsyncLoop

        self.stream = stream
        self._loop = AsyncLoop("icetail-nats-test")
        self._nc: Any = self._loop.run(self._connect(), 10)

    async def _connect(self) -> Any:
        import nats

        return await nats.connect(NATS_URL)

    async def _count(self) -> int:
        from nats.js.errors import NotFoundError

        try:
            return int((await self._nc.jetstream().stream_info(self.stream)).state.messages)
        except NotFoundError:  # before the first run creates it
            return 0

    def probe(self, kind: str) -> int:
        return self._loop.run(self._count(), 10)

    def messages(self) -> list[Any]:
        return self._loop.run(_messages(self._nc.jetstream(), self.stream), 60)

    def read(self) -> pa.Table:
        messages = self.messages()
        return pa.table(
            {"id": [m.headers["Nats-Msg-Id"] for m in messages], "envelope": [m.data.decode() for m in messages]}
        )

    def close(self) -> None:
        self._loop.run(self._nc.close(), 10)
        self._loop.stop()


def _crash_source(local: LocalCatalog) -> Any:
    """Three appends of 150 rows, a copy-on-write delete rewriting every file (45 deletes, the rest
    carry-overs), an upsert (a delete, then an append) and an append: about 600 changes."""
    from pyiceberg.expressions import In

    (table,) = bus.id_v_tables(local, ["events"], properties={"write.delete.mode": "copy-on-write"})
    steps = [
        *(
            lambda t, f=f: t.append(
                pa.table({"id": range(f * 150, f * 150 + 150), "v": [f"v{f}"] * 150}, schema=bus.ARROW)
            )
            for f in range(3)
        ),
        lambda t: t.delete(In("id", [i for i in range(450) if i % 10 == 3])),
        lambda t: t.upsert(pa.table({"id": [40, 50, 1000], "v": ["x", "y", "z"]}, schema=bus.ARROW)),
        lambda t: t.append(pa.table({"id": range(2000, 2080), "v": ["w"] * 80}, schema=bus.ARROW)),
    ]
    for step in steps:
        step(table)
        table = local.load("ns.events")
    return table


@pytest.mark.parametrize("engine", ["in-process", "spark"])
def test_sigkill_delivers_every_change_once(stream: str, tmp_path: Path, engine: str) -> None:
    """`icetail run` into the stream, SIGKILLed at seeded moments (inside sink writes, between a write
    and its offset commit), then run to the end: the stream replays onto the empty table to its
    rows. On Spark the delete is reconciled in partitions, so kills land between partitions too."""
    local = new_catalog(tmp_path / "cat", "natscrash")
    table = _crash_source(local)
    rng = random.Random(f"{SEED}:nats:{engine}")
    state_url, consumer = f"sqlite:///{tmp_path}/state.db", "events-nats"
    spark = engine == "spark"
    env = child_env([local], tmp_path / "spark", extra={} if spark else {"ICETAIL_LOCAL_MAX_BYTES": ""})
    cmd = [
        *icetail_command(), "run", "--catalog", local.name, "--table", "ns.events", "--state", state_url,
        "--sink", _url(stream, query="&create=true&key=id"), "--consumer", consumer, "--until-caught-up",
        "--max-snapshots-per-batch", "1", "--chunk-rows", "25", "--reconcile-partition-bytes", "1500",
    ]  # fmt: skip
    schedule = (
        [KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(200, 480))]  # in the delete's partitions or before
        if spark
        else [
            KillTrigger("written", rng.uniform(0.0, 0.003), rng.randint(1, 10)),
            KillTrigger("started", rng.uniform(0.0, 0.01), rng.randint(20, 120)),
        ]
    )

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        assert rows is not None
        ids = rows.column("id").to_pylist()
        assert len(set(ids)) == len(ids), f"a message id twice after run {attempt.index}"
        # no change of a missing row
        replayed = bus.replay([json.loads(e) for e in rows.column("envelope").to_pylist()])
        assert all(n == 1 for n in replayed.values()), f"a change stored twice after run {attempt.index}"

    watch = _StreamWatch(stream)
    try:
        report = crash_loop(
            cmd, env, state_url=state_url, consumer=consumer, sink=watch,  # type: ignore[arg-type]
            schedule=schedule, logs=tmp_path / "logs", check=check, timeout=60, final_timeout=120,
        )  # fmt: skip
        messages = watch.messages()
    finally:
        watch.close()
    summary = f"seed {SEED}, {engine}\n{report.summary()}"
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    assert report.kills >= 1, summary
    assert view_state(state_url, consumer).cursor == table.metadata.current_snapshot_id, summary
    records = [json.loads(m.data) for m in messages]
    assert bus.replay(records) == bus.table_rows(table), summary
    bus.check_each_snapshot(table, records)
    if spark:  # the delete went out in partitions (row start: the partition's index)
        deletes = {tuple(m.headers["Nats-Msg-Id"].split(":")[4:6]) for m in messages if m.headers["Icetail-Op"] == "d"}
        assert len(deletes) >= 3, summary
