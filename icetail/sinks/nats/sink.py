"""Changes onto NATS JetStream, one Debezium envelope per message, exactly once.

Each change record (debezium.py: an UPDATE pair is one record) becomes one message on subject
`PREFIX.<namespace>.<table>` (with `key=`, `.<key>` appended), its payload the envelope as one
strict-JSON object (the jsonl sink's encoding), with headers:

* `Nats-Msg-Id`: `<consumer>:<snapshot id>:<change ordinal>:<batch id>:<split index>:<row start>:<record>`,
  the record's place in the consumer's stream (`message_id`: the chunk key's parts and the record's
  index in the chunk), so a replayed chunk (the same key, the same rows: BatchShape keeps a resumed
  batch's cut) publishes the same ids and JetStream drops the copies it still remembers;
* `Icetail-Op` (c, u, d, r), `Icetail-Table` (NS.TABLE), `Icetail-Snapshot-Id`,
  `Icetail-Change-Ordinal`, and with `key=` `Icetail-Key` (the key values as a JSON array).

**Exactly once.** The pipeline writes a chunk, then commits its offset; a crash between the two
replays the chunk. `write` returns only when every message of the chunk is acknowledged by the
stream (an ack flagged `duplicate` is a message the stream already holds: delivered), so a chunk
whose offset is committed is stored whole, and a replayed one is stored once as long as the replay
comes within the stream's duplicate window. The sink refuses at open a stream whose window is
shorter than MIN_DUPLICATE_WINDOW_SECONDS (2 minutes, four default lease TTLs: a `serve` elsewhere
takes a dead run's consumer over after one TTL and replays within seconds); a stream it creates
(`create=true`) gets CREATED_DUPLICATE_WINDOW_SECONDS.

**Order.** Messages are published on one connection in delivery order (an update pair is one
message) and their acks awaited in that order before the next chunk, so the stream holds each
key's changes (by identifier columns) in change-ordinal order. Across keys a batch is in
change-ordinal order except a `--net` batch folded in partitions: one record per key, partition
after partition (docs/sinks.md says what holds without identifier columns). The connection does
not reconnect on its own (a reconnecting client would send what it buffered after messages lost
with the old connection); the next write opens a new one, and the failed chunk is replayed whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import pyarrow as pa

from icetail.kernel.errors import (
    ConfigError,
    IcetailError,
    SinkError,
    SinkRejectedError,
    SinkSetupError,
    error_text,
)
from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.loop import AsyncLoop
from icetail.sinks.bus.opening import BusSink, Opening, StreamMissingError, on_loop
from icetail.sinks.bus.records import record_key_values
from icetail.sinks.bus.tls import handshake_refusal
from icetail.sinks.files.jsonl_encoding import encode_jsonl
from icetail.sinks.nats.url import TLS_SCHEME, NatsTarget

MIN_DUPLICATE_WINDOW_SECONDS = 120.0
CREATED_DUPLICATE_WINDOW_SECONDS = 300.0
CONNECT_TIMEOUT_SECONDS = 5.0
ACK_TIMEOUT_SECONDS = 30.0  # for one message's ack once published; a chunk's whole wait is bounded too
MAX_PENDING_ACKS = 4000  # nats-py's default: publishing waits for acks beyond this many in flight
HEADER_OP = "Icetail-Op"
HEADER_TABLE = "Icetail-Table"
HEADER_SNAPSHOT = "Icetail-Snapshot-Id"
HEADER_ORDINAL = "Icetail-Change-Ordinal"
HEADER_KEY = "Icetail-Key"
MSG_ID = "Nats-Msg-Id"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Message:
    subject: str
    payload: bytes
    headers: dict[str, str]

    @property
    def size(self) -> int:
        """What counts against max_payload: the payload and the header block (NATS/1.0 line, `K: V` lines)."""
        headers = self.headers  # sum(len(k) + len(v) + 4 for each header), without a generator: one per message
        return len(self.payload) + 14 + sum(map(len, headers)) + sum(map(len, headers.values())) + 4 * len(headers)


def subject_token(text: str) -> str:
    """`text` as one subject token: letters, digits, `_` and `-` kept, every other byte %XX (injective)."""
    return quote(text, safe="_-~").replace(".", "%2E").replace("~", "%7E")


def message_id(key: ChunkKey, snapshot_id: Any, ordinal: Any, record: int) -> str:
    """The record's place in the consumer's delivery: its chunk key's parts and its index in the chunk.

    `row_start_inclusive` is a row offset for a chunk read from a split but the partition's index
    for a snapshot reconciled (or a `--net` batch folded) in partitions, so it is kept as a field
    of its own beside the record's index: adding the two would give partition 0's record 1 and
    partition 1's record 0 one id, and JetStream would drop the second as a copy.
    """
    return f"{key.consumer}:{snapshot_id}:{ordinal}:{key.batch_id}:{key.split_index}:{key.row_start_inclusive}:{record}"


def messages(key: ChunkKey, records: pa.Table, prefix: str, key_columns: Sequence[str] = ()) -> list[Message]:
    """The messages of a chunk's envelope records, in order (module docstring)."""
    if not records.num_rows:
        return []
    payloads = encode_jsonl(records).split(b"\n")[:-1]
    source = records.column("source").combine_chunks()
    ops = records.column("op").to_pylist()
    dbs = source.field("db").to_pylist()
    tables = source.field("table").to_pylist()
    snapshots = source.field("snapshot_id").to_pylist()
    ordinals = source.field("change_ordinal").to_pylist()
    keys = record_key_values(records, key_columns, "NATS sink") if key_columns else None
    subjects: dict[tuple[str, str], str] = {}
    out = []
    for i, payload in enumerate(payloads):
        db, table = dbs[i], tables[i]
        base = subjects.get((db, table))
        if base is None:
            tokens = [subject_token(t) for t in db.split(".")] + [subject_token(table)]
            base = subjects[(db, table)] = ".".join([prefix, *tokens])
        headers = {
            MSG_ID: message_id(key, snapshots[i], ordinals[i], i),
            HEADER_OP: ops[i],
            HEADER_TABLE: f"{db}.{table}" if db else table,
            HEADER_SNAPSHOT: str(snapshots[i]),
            HEADER_ORDINAL: str(ordinals[i]),
        }
        subject = base
        if keys is not None:
            values = keys[i]
            headers[HEADER_KEY] = json.dumps(values, default=str)  # ensure_ascii: a header is one ASCII line
            subject = f"{base}.{','.join(subject_token(_key_text(v)) for v in values)}"
        out.append(Message(subject, payload, headers))
    return out


def _key_text(value: Any) -> str:
    return "null" if value is None else value if isinstance(value, str) else json.dumps(value, default=str)



def covers(pattern: str, prefix: str) -> bool:
    """Whether a stream subject `pattern` takes every subject `prefix.<one or more tokens>`."""
    wanted = prefix.split(".")
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if token == ">":
            return i == len(tokens) - 1
        if i >= len(wanted) or token not in ("*", wanted[i]):
            return False
    return False



class _Connection:
    """One connection to the server and its stream, as checked at open (async; runs on AsyncLoop)."""

    def __init__(self, target: NatsTarget) -> None:
        self.target = target
        self.nc: Any = None
        self.js: Any = None
        self.max_message: int = 0  # the server's max_payload, or the stream's max_msg_size if smaller

    async def connect(self) -> None:
        import nats
        import nats.errors

        failed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

        async def on_error(exc: Exception) -> None:  # nats-py would log every error itself
            if not failed.done():
                failed.set_result(exc)

        where = self.target.where
        tls = self.target.tls.context() if self.target.tls is not None else None
        # nats-py keeps retrying a refused first connect even with allow_reconnect=False: its first
        # error (told to error_cb) ends the attempt
        connecting = asyncio.ensure_future(
            nats.connect(
                servers=[self.target.server],
                connect_timeout=int(CONNECT_TIMEOUT_SECONDS),
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=on_error,
                name="icetail",
                tls=tls,
            )
        )
        either: list[asyncio.Future[Any]] = [connecting, failed]
        await asyncio.wait(either, timeout=CONNECT_TIMEOUT_SECONDS * 2, return_when="FIRST_COMPLETED")
        try:
            if not connecting.done():
                connecting.cancel()
                await asyncio.gather(connecting, return_exceptions=True)
                raise (
                    failed.result()
                    if failed.done()
                    else asyncio.TimeoutError(f"no answer in {CONNECT_TIMEOUT_SECONDS * 2:g}s")
                )
            self.nc = connecting.result()
        except nats.errors.AuthorizationError as exc:
            raise SinkSetupError(
                f"NATS server {where} refused the sink's credentials ({error_text(exc)}): fix USER:PASSWORD "
                "(or the token) in the sink URL"
            ) from exc
        except (OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
            refused = handshake_refusal(f"NATS server {where}", exc, None if tls is not None else TLS_SCHEME)
            if refused is not None:
                raise refused from exc
            raise SinkError(
                f"NATS server {where} cannot be reached ({error_text(exc)}): start it, or fix HOST:PORT in the sink URL"
            ) from exc
        self.js = self.nc.jetstream(timeout=ACK_TIMEOUT_SECONDS, publish_async_max_pending=MAX_PENDING_ACKS)
        self.max_message = int(self.nc.max_payload)

    async def check_stream(self, *, create: bool) -> None:
        """The stream exists (or is created, with `create`), takes the prefix's subjects, and its
        duplicate window covers a restart; ConfigError naming the fix otherwise."""
        import nats.errors
        import nats.js.errors
        from nats.js.api import StreamConfig

        target = self.target
        name, prefix, where = target.stream, target.subject_prefix, target.where
        try:
            info = await self.js.stream_info(name)
        except nats.js.errors.NotFoundError:
            if not create:
                raise StreamMissingError(
                    f"NATS stream {name!r} does not exist on {where}: create it (nats stream add {name} "
                    f"--subjects '{prefix}.>' --dupe-window 5m) or add &create=true to the sink URL"
                ) from None
            info = await self.js.add_stream(
                StreamConfig(name=name, subjects=[f"{prefix}.>"], duplicate_window=CREATED_DUPLICATE_WINDOW_SECONDS)
            )
        except nats.js.errors.ServiceUnavailableError as exc:
            raise SinkSetupError(
                f"NATS server {where} has no JetStream ({error_text(exc)}): start nats-server with -js "
                "(or jetstream {} in its config)"
            ) from exc
        except (asyncio.TimeoutError, nats.errors.Error) as exc:
            raise SinkError(f"NATS server {where}: reading stream {name!r} failed: {error_text(exc)}") from exc
        config = info.config
        subjects = list(config.subjects or [])
        if not any(covers(s, prefix) for s in subjects):
            raise ConfigError(
                f"NATS stream {name!r} takes subjects {', '.join(subjects) or 'none'}, not {prefix}.>: add them "
                f"(nats stream edit {name} --subjects '{prefix}.>') or use its prefix in the sink URL"
            )
        window = float(config.duplicate_window or 0)
        if window < MIN_DUPLICATE_WINDOW_SECONDS:
            raise ConfigError(
                f"NATS stream {name!r} has a duplicate window of {window:g}s, shorter than the "
                f"{MIN_DUPLICATE_WINDOW_SECONDS:g}s a restart needs to replay a chunk without duplicates: "
                f"nats stream edit {name} --dupe-window 5m"
            )
        if config.max_msg_size is not None and config.max_msg_size > 0:
            self.max_message = min(self.max_message, int(config.max_msg_size))

    async def publish(self, batch: list[Message]) -> tuple[int, int, int]:
        """Publish in order, then await every ack in order: (first sequence, last sequence, duplicates)."""
        import nats.errors
        import nats.js.errors

        js, stream, where = self.js, self.target.stream, self.target.where
        futures: list[asyncio.Future[Any] | None] = []
        first = last = duplicates = 0
        try:
            for message in batch:
                futures.append(
                    await js.publish_async(message.subject, message.payload, stream=stream, headers=message.headers)
                )
            for i, future in enumerate(futures):
                assert future is not None
                ack = await asyncio.wait_for(future, ACK_TIMEOUT_SECONDS)
                if ack.duplicate:
                    duplicates += 1
                first = first or ack.seq
                last = ack.seq
                futures[i] = None
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError) as exc:
            raise SinkError(
                f"NATS sink: no stream on {where} takes subject {batch[0].subject} (stream {stream!r} deleted, "
                "or its subjects changed); recreate it or fix the sink URL"
            ) from exc
        except nats.js.errors.APIError as exc:
            if exc.err_code == 10054:  # message size exceeds the stream's maximum
                raise SinkRejectedError(_too_large(where, stream, error_text(exc))) from exc
            if exc.err_code == 10060:  # the subject belongs to another stream
                raise SinkRejectedError(
                    f"NATS sink: subject {batch[0].subject} is not stored by stream {stream!r} on {where} "
                    f"({error_text(exc)}): fix stream= or the subject prefix in the sink URL"
                ) from exc
            raise SinkError(f"NATS stream {stream!r} on {where} refused a message: {error_text(exc)}") from exc
        except (OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
            raise SinkError(f"NATS sink: publishing to {where} failed: {error_text(exc)}") from exc
        finally:
            for future in futures:
                if future is not None and not future.done():
                    future.cancel()
                elif future is not None and not future.cancelled():
                    future.exception()  # retrieved: no "never retrieved" warning
        return first, last, duplicates

    async def close(self) -> None:
        if self.nc is not None and not self.nc.is_closed:
            try:
                await self.nc.close()
            except Exception:  # closing a broken connection: nothing is left to flush
                pass

    @property
    def closed(self) -> bool:
        return self.nc is None or bool(self.nc.is_closed)


def _too_large(where: str, stream: str, detail: str) -> str:
    return (
        f"NATS sink: a change's message is larger than {where} or stream {stream!r} accepts ({detail}): raise "
        f"max_payload in the server's configuration (up to 64MB) or the stream's max_msg_size "
        f"(nats stream edit {stream} --max-msg-size ...)"
    )


def _opening(target: NatsTarget, loop: AsyncLoop) -> Opening[_Connection]:
    return on_loop(
        f"NATS server {target.where}",
        loop,
        lambda: _Connection(target),
        connect_seconds=CONNECT_TIMEOUT_SECONDS * 3,
        check_seconds=ACK_TIMEOUT_SECONDS,
        close_seconds=CONNECT_TIMEOUT_SECONDS,
    )


class NatsSink(BusSink[_Connection]):
    """Publishes each chunk's envelope records to a JetStream stream (module docstring); exactly once.

    It takes Debezium envelopes only, and opens, drops and closes its connection, as BusSink says.
    """

    def __init__(self, target: NatsTarget, *, consumer: str) -> None:
        self.target = target
        self._loop = AsyncLoop("icetail-nats")
        super().__init__(_opening(target, self._loop), consumer=consumer, create=target.create, loop=self._loop)

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """Publish the records `rows` (envelopes) and await their acks; the token names the stream's sequences."""
        if self._closed:
            raise SinkRejectedError(f"NATS sink {self.target.identity} is closed")
        if key.consumer != self.consumer:
            raise ConfigError(f"NATS sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}")
        if "source" not in rows.column_names:
            raise SinkRejectedError(
                "the NATS sink takes Debezium envelopes: open it with open_sink(url, consumer=..., table='NS.TABLE')"
            )
        batch = messages(key, rows, self.target.subject_prefix, self.target.key)
        if not batch:
            return None
        if self._connection is None or self._connection.closed:
            self._connection = self._open(create=False)  # a stream deleted since is refused, not made again
        connection = self._connection
        largest = max(batch, key=lambda m: m.size)
        if largest.size > connection.max_message:
            raise SinkRejectedError(
                _too_large(
                    self.target.where,
                    self.target.stream,
                    f"{largest.size} bytes for subject {largest.subject}, the limit is {connection.max_message}",
                )
            )
        budget = ACK_TIMEOUT_SECONDS + len(batch) / 1000  # a chunk of a million messages gets ~17 minutes
        try:
            first, last, duplicates = self._loop.run(connection.publish(batch), budget)
        except IcetailError:
            self._drop_connection()
            raise
        except TimeoutError as exc:
            self._drop_connection()
            raise SinkError(f"NATS sink: chunk {key.name} was not acknowledged within {budget:.0f}s") from exc
        self.duplicates += duplicates
        return f"{self.target.stream}:{first}-{last}"


def check_reachable(target: NatsTarget) -> None:
    """Reach the server and the stream without changing anything (a missing stream passes with create=true)."""
    loop = AsyncLoop("icetail-nats")
    try:
        _opening(target, loop).reach(created_later=target.create)
    finally:
        loop.stop()
