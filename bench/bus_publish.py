"""Messages per second into each message bus: icetail's sink against the broker's own client (the limit).

    PYTHONPATH=$PWD .venv-spark4/bin/python -m bench.bus_publish [--rows N] [--chunk-rows N] [--rounds N]
        [--brokers nats,redis,rabbitmq] [--nats URL] [--redis HOST:PORT] [--rabbitmq HOST:PORT]

Driver side only (no Spark, no table): `--rows` change rows of one table (id bigint, ts
timestamptz, k int, amount double 5% null, name string 5% null, category string, flag boolean,
day date; 70% inserts, 10% update pairs, 10% deletes, one snapshot) start in Arrow as the
pipeline hands them to the sink, cut in chunks of `--chunk-rows`. Each record is one message
(an update pair is one). Per broker, each round runs both sides once, in alternating order (A
first in odd rounds, B first in even ones), each on a fresh stream deleted after it:

* A, icetail: the sink `open_sink(URL, consumer=..., table=...)` makes (the Debezium envelope
  around the broker sink, `prepare` told the batch's sequence numbers), `write(key, chunk)` for
  every chunk: the envelope, its JSON, the messages and the publish with every ack, confirm or
  reply awaited, as in production. The open and the close are outside the time;
* B, the limit: the broker's own Python client publishing the same messages (the bytes icetail
  puts on the wire: payload, headers / fields / AMQP properties, made before the clock starts)
  in its best loop with the same guarantees: nats-py `js.publish_async` of every message with
  its Nats-Msg-Id (de-duplication) then every ack awaited; redis-py XADD of the same fields,
  pipelined (`--redis-pipeline` commands a round trip, no MULTI); rstream's `Producer.send_batch`
  under the same producer name and publishing ids (de-duplication), frames of up to 1,000
  messages, every confirm awaited at the end of each chunk.

Printed per round: seconds, messages/s and this process's CPU seconds of each side, A/B, and the
load average; then min / median / max of the ratio per broker (goal >= 0.7x). `--profile` runs
side A once per broker under cProfile and prints the top functions by cumulative time.
The figures go to bench/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.sinks.base import ChunkKey
from icetail.sinks.debezium import EnvelopeSource, envelopes
from icetail.sinks.registry import open_sink

CONSUMER = "bench-bus"
TABLE = "shop.orders"
SNAPSHOT_ID = 7_000_000_000_000_000_001
SEQUENCE_NUMBER = 42
BATCH_ID = "b000001-1a2b3c4d-c1000"  # the Redis sink reads the generation from b<generation>-
DATA = pa.schema(
    [
        pa.field(name, type_, nullable=name != "id", metadata={b"PARQUET:field_id": str(i + 1).encode()})
        for i, (name, type_) in enumerate(
            [
                ("id", pa.int64()),
                ("ts", pa.timestamp("us", tz="UTC")),
                ("k", pa.int32()),
                ("amount", pa.float64()),
                ("name", pa.string()),
                ("category", pa.string()),
                ("flag", pa.bool_()),
                ("day", pa.date32()),
            ]
        )
    ]
)


def data_rows(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    amount = pa.array(rng.normal(100, 30, n), mask=rng.random(n) < 0.05)
    names = pa.array([f"name-{v}" for v in rng.integers(0, 1 << 40, n)], pa.string())
    names = pc.if_else(pa.array(rng.random(n) < 0.05), pa.scalar(None, pa.string()), names)
    return pa.table(
        [
            pa.array(ids, pa.int64()),
            pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, n), pa.timestamp("us", tz="UTC")),
            pa.array(rng.integers(0, 1000, n), pa.int32()),
            amount,
            names,
            pa.array([f"cat-{v}" for v in rng.integers(0, 50, n)], pa.string()),
            pa.array(rng.random(n) < 0.5),
            pa.array(rng.integers(19000, 20000, n).astype(np.int32), pa.date32()),
        ],
        schema=DATA,
    )


def change_rows(rows: int) -> pa.Table:
    """`rows` change rows of one snapshot: 70% inserts, 10% update pairs (20% of the rows), 10% deletes,
    interleaved as a reconciled snapshot delivers them (an UPDATE_BEFORE right before its UPDATE_AFTER)."""
    rng = np.random.default_rng(20261205)
    kinds: list[str] = []
    while len(kinds) < rows:
        draw = rng.random()
        if draw < 0.1 and len(kinds) + 2 <= rows:
            kinds += ["UPDATE_BEFORE", "UPDATE_AFTER"]
        elif draw < 0.2:
            kinds.append("DELETE")
        else:
            kinds.append("INSERT")
    ids = np.arange(rows)
    types = np.array(kinds)
    ids[types == "UPDATE_AFTER"] = ids[np.flatnonzero(types == "UPDATE_AFTER") - 1]  # a pair has one key
    data = data_rows(ids, 1)
    n = data.num_rows
    extra = {
        "_change_type": pa.array(kinds, pa.string()),
        "_change_ordinal": pa.array(np.zeros(n, np.int32)),
        "_commit_snapshot_id": pa.array(np.full(n, SNAPSHOT_ID, np.int64)),
        "_commit_timestamp": pa.array(np.full(n, 1_767_225_600_000_000, np.int64), pa.timestamp("us", tz="UTC")),
    }
    for name, values in extra.items():
        data = data.append_column(name, values)
    return data


def chunks(rows: pa.Table, chunk_rows: int) -> list[tuple[ChunkKey, pa.Table]]:
    """The chunks as the pipeline cuts them (an update pair never split across two)."""
    out = []
    types = rows.column("_change_type").to_pylist()
    start = 0
    while start < rows.num_rows:
        end = min(start + chunk_rows, rows.num_rows)
        if end < rows.num_rows and types[end - 1] == "UPDATE_BEFORE":
            end += 1
        out.append((ChunkKey(CONSUMER, BATCH_ID, 0, "split000", start), rows.slice(start, end - start)))
        start = end
    return out


def envelope_chunks(parts: list[tuple[ChunkKey, pa.Table]]) -> list[tuple[ChunkKey, pa.Table]]:
    source = EnvelopeSource(TABLE, {SNAPSHOT_ID: SEQUENCE_NUMBER})
    return [(key, envelopes(rows, source)) for key, rows in parts]


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


# ---------------------------------------------------------------- side A: icetail's sink


def icetail_side(url: str, parts: list[tuple[ChunkKey, pa.Table]], cleanup: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of every chunk's `write`; the sink opened and closed outside the time."""
    sink: Any = open_sink(url, consumer=CONSUMER, table=TABLE)
    try:
        sink.prepare(BATCH_ID, {SNAPSHOT_ID: SEQUENCE_NUMBER}, full_start=False)
        cpu, started = time.process_time(), time.perf_counter()
        for key, rows in parts:
            sink.write(key, rows)
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        sink.close()
        cleanup()


# ---------------------------------------------------------------- NATS JetStream


class Nats:
    name = "nats"

    def __init__(self, server: str) -> None:
        self.server = server

    def fresh(self) -> tuple[str, str, str]:
        tag = uuid.uuid4().hex[:10]
        prefix, stream = f"benchbus{tag}", f"BENCHBUS_{tag}"
        return f"{self.server.rstrip('/')}/{prefix}?stream={stream}&create=true", prefix, stream

    def encoded(self, chunks_: list[tuple[ChunkKey, pa.Table]], prefix: str) -> list[list[Any]]:
        from icetail.sinks.nats.sink import messages

        return [messages(key, records, prefix) for key, records in chunks_]

    def delete(self, stream: str) -> None:
        async def go() -> None:
            import nats

            nc = await nats.connect(self.server)
            try:
                await nc.jetstream().delete_stream(stream)
            except Exception:
                pass
            await nc.close()

        asyncio.run(go())

    def icetail(self, parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        url, _, stream = self.fresh()
        return icetail_side(url, parts, lambda: self.delete(stream))

    def client(self, envelope_parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        _, prefix, stream = self.fresh()
        batches = self.encoded(envelope_parts, prefix)

        async def go() -> tuple[float, float]:
            import nats
            from nats.js.api import StreamConfig

            from icetail.sinks.nats.sink import CREATED_DUPLICATE_WINDOW_SECONDS

            nc = await nats.connect(self.server)
            js = nc.jetstream(timeout=30)
            await js.add_stream(
                StreamConfig(name=stream, subjects=[f"{prefix}.>"], duplicate_window=CREATED_DUPLICATE_WINDOW_SECONDS)
            )
            try:
                cpu, started = time.process_time(), time.perf_counter()
                for batch in batches:
                    futures = [
                        await js.publish_async(m.subject, m.payload, stream=stream, headers=m.headers) for m in batch
                    ]
                    for future in futures:
                        ack = await future
                        assert not ack.duplicate
                return time.perf_counter() - started, time.process_time() - cpu
            finally:
                await js.delete_stream(stream)
                await nc.close()

        return asyncio.run(go())


# ---------------------------------------------------------------- Redis Streams


class Redis:
    name = "redis"

    def __init__(self, server: str, pipeline: int) -> None:
        self.host, _, port = server.partition(":")
        self.port = int(port or 6379)
        self.pipeline = pipeline

    def connect(self) -> Any:
        import redis

        return redis.Redis(host=self.host, port=self.port)

    def delete(self, stream: str) -> None:
        from icetail.sinks.redis.script import marks_key

        client = self.connect()
        client.delete(stream, marks_key(stream))
        client.close()

    def icetail(self, parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        stream = f"benchbus:{uuid.uuid4().hex[:10]}"
        url = f"redis-stream://{self.host}:{self.port}/{stream}?create=true"
        return icetail_side(url, parts, lambda: self.delete(stream))

    def client(self, envelope_parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        from icetail.sinks.redis.entries import entries

        stream = f"benchbus:{uuid.uuid4().hex[:10]}"
        batches = [
            [dict(chunk.fields(i)) for i in range(chunk.count)]
            for chunk in (entries(key, records) for key, records in envelope_parts)
            if chunk is not None
        ]
        client = self.connect()
        client.ping()
        try:
            cpu, started = time.process_time(), time.perf_counter()
            for batch in batches:
                for start in range(0, len(batch), self.pipeline):
                    pipe = client.pipeline(transaction=False)
                    for fields in batch[start : start + self.pipeline]:
                        pipe.xadd(stream, fields)
                    pipe.execute()
            seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
            assert client.xlen(stream) == sum(len(b) for b in batches)
            return seconds, cpu_seconds
        finally:
            client.delete(stream)
            client.close()


# ---------------------------------------------------------------- RabbitMQ Streams


class Rabbit:
    name = "rabbitmq"

    def __init__(self, server: str) -> None:
        self.host, _, port = server.partition(":")
        self.port = int(port or 5552)

    def producer(self) -> Any:
        from rstream import Producer

        from icetail.sinks.rabbitmq.connection import REQUESTED_FRAME_MAX

        return Producer(self.host, self.port, username="guest", password="guest", frame_max=REQUESTED_FRAME_MAX)

    def delete(self, stream: str) -> None:
        async def go() -> None:
            async with self.producer() as producer:
                await producer.delete_stream(stream, missing_ok=True)

        asyncio.run(go())

    def icetail(self, parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        stream = f"benchbus-{uuid.uuid4().hex[:10]}"
        url = f"rabbitmq-stream://guest:guest@{self.host}:{self.port}/{stream}?create=true"
        return icetail_side(url, parts, lambda: self.delete(stream))

    def client(self, envelope_parts: list[tuple[ChunkKey, pa.Table]]) -> tuple[float, float]:
        from rstream.utils import RawMessage

        from icetail.sinks.rabbitmq.connection import MAX_MESSAGES_PER_FRAME
        from icetail.sinks.rabbitmq.frames import encoded_parts
        from icetail.sinks.rabbitmq.ids import producer_name

        stream = f"benchbus-{uuid.uuid4().hex[:10]}"
        batches = [
            (producer_name(key), [(p.first_id + i, p.message(i)) for p in parts for i in range(p.count)])
            for key, parts in ((key, list(encoded_parts(key, records))) for key, records in envelope_parts)
        ]

        async def go() -> tuple[float, float]:
            async with self.producer() as producer:
                await producer.create_stream(stream)
                try:
                    # the connection to the stream's leader and the producer's declaration before the clock
                    # (icetail's sink has its connection at open): rstream makes them at the first send
                    async with producer._lock:
                        await producer._get_or_create_publisher(stream, publisher_name=batches[0][0])
                    cpu, started = time.process_time(), time.perf_counter()
                    for name, batch in batches:
                        confirmed = asyncio.get_running_loop().create_future()
                        waiting = [len(batch)]

                        def on_confirm(status: Any, waiting: list[int] = waiting, done: Any = confirmed) -> None:
                            if not status.is_confirmed and not done.done():
                                done.set_exception(RuntimeError(f"not confirmed: {status}"))
                            waiting[0] -= 1
                            if waiting[0] == 0 and not done.done():
                                done.set_result(None)

                        for start in range(0, len(batch), MAX_MESSAGES_PER_FRAME):
                            piece = [
                                RawMessage(data, publishing_id=pid)
                                for pid, data in batch[start : start + MAX_MESSAGES_PER_FRAME]
                            ]
                            await producer.send_batch(stream, piece, publisher_name=name, on_publish_confirm=on_confirm)
                        await asyncio.wait_for(confirmed, 120)
                    return time.perf_counter() - started, time.process_time() - cpu
                finally:
                    await producer.delete_stream(stream, missing_ok=True)

        return asyncio.run(go())


# ---------------------------------------------------------------- the rounds


def profile_icetail(broker: Any, parts: list[tuple[ChunkKey, pa.Table]], top: int = 25) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    broker.icetail(parts)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    print(f"--- cProfile of side A, {broker.name} (this thread only; the sink's event loop thread is not seen):")
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="change rows (default 100,000)")
    parser.add_argument("--chunk-rows", type=int, default=100_000, help="rows per chunk (default: one chunk)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--brokers", default="nats,redis,rabbitmq")
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--redis", default="127.0.0.1:6379")
    parser.add_argument("--rabbitmq", default="127.0.0.1:5552")
    parser.add_argument("--redis-pipeline", type=int, default=1000, help="XADDs per round trip of side B")
    parser.add_argument("--profile", action="store_true", help="cProfile side A once per broker, no rounds")
    args = parser.parse_args()

    rows = change_rows(args.rows)
    parts = chunks(rows, args.chunk_rows)
    envelope_parts = envelope_chunks(parts)
    count = sum(t.num_rows for _, t in envelope_parts)
    payload = sum(len(line) for _, t in envelope_parts for line in _lines(t))
    print(
        f"{rows.num_rows:,} change rows -> {count:,} messages in {len(parts)} chunk(s) of <= {args.chunk_rows:,} rows; "
        f"envelope JSON {payload / count:,.0f} bytes a message on average; load {load()}",
        flush=True,
    )
    every: dict[str, Any] = {"nats": Nats(args.nats), "redis": Redis(args.redis, args.redis_pipeline),
                             "rabbitmq": Rabbit(args.rabbitmq)}  # fmt: skip
    brokers = [every[name] for name in args.brokers.split(",")]
    if args.profile:
        for broker in brokers:
            profile_icetail(broker, parts)
        return
    ratios: dict[str, list[float]] = {b.name: [] for b in brokers}
    for r in range(args.rounds):
        for broker in brokers:
            sides: dict[str, tuple[float, float]] = {}
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            before = load()
            for side in order:
                sides[side] = broker.icetail(parts) if side == "A" else broker.client(envelope_parts)
            (a, a_cpu), (b, b_cpu) = sides["A"], sides["B"]
            ratio = b / a  # messages/s of A over messages/s of B
            ratios[broker.name].append(ratio)
            print(
                f"round {r + 1} {broker.name:8} ({'A then B' if order[0] == 'A' else 'B then A'}): "
                f"icetail {a:.2f}s {count / a:,.0f} msg/s (CPU {a_cpu:.2f}s), "
                f"client {b:.2f}s {count / b:,.0f} msg/s (CPU {b_cpu:.2f}s); A/B {ratio:.2f}x; load {before}-{load()}",
                flush=True,
            )
    for name, values in ratios.items():
        print(
            f"summary {name:8}: A/B min {min(values):.2f}x, median {statistics.median(values):.2f}x, "
            f"max {max(values):.2f}x over {len(values)} rounds (goal >= 0.7x)"
        )


def _lines(records: pa.Table) -> list[bytes]:
    from icetail.sinks.files.jsonl_encoding import encode_jsonl

    return encode_jsonl(records).split(b"\n")[:-1]


if __name__ == "__main__":
    main()
