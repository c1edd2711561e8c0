"""Changes onto a Redis stream, one Debezium envelope per entry, exactly once.

Each change record (debezium.py: an UPDATE pair is one record) becomes one entry of the stream
the URL names, with the fields `op` (c, u, d, r), `table` (NS.TABLE), `snapshot_id`,
`change_ordinal`, with `key=` `key` (the key values as a JSON array), `consumer`, `position`
(`BATCH_ID:SPLIT:ROW:RECORD`, the entry's place in the consumer's delivery) and `envelope` (the
record as one strict-JSON object, the jsonl sink's encoding). Entry ids are the server's own
(`*`): several consumers (the tables of a `serve` pattern) may share one stream.

**Exactly once.** The pipeline writes a chunk, then commits its offset; a crash between the two
replays the chunk. The entries are appended by a Lua script (script.py) that skips every entry at
or before the consumer's mark and moves the mark in the same atomic step, so a replayed chunk,
or the rest of one cut off midway, adds exactly the entries the stream lacks. `write` returns
only once the server answered for every entry of the chunk.

**Order.** A chunk's entries are sent in delivery order (change-ordinal order) in pieces of at
most PIECE_ENTRIES, each piece answered before the next is sent, on one connection: the stream
holds each consumer's changes, so each key's, in order. Entries of different consumers on one
stream interleave as they arrive.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from icetail.kernel.errors import (
    ConfigError,
    SinkError,
    SinkRejectedError,
    SinkSetupError,
    error_text,
)
from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.opening import BusSink, Opening, StreamMissingError
from icetail.sinks.bus.tls import handshake_refusal
from icetail.sinks.redis.entries import Entries, entries, piece_bounds
from icetail.sinks.redis.script import APPEND, marks_key
from icetail.sinks.redis.url import RedisTarget

CONNECT_TIMEOUT_SECONDS = 5.0
REPLY_TIMEOUT_SECONDS = 30.0  # one piece's answer
PIECE_ENTRIES = 500  # entries per script call: the server runs nothing else meanwhile
PIECE_BYTES = 1 << 20  # of a piece's arguments: the least proto-max-bulk-len a server may have (1 MiB)
SERVER_LIMIT = 512 << 20  # proto-max-bulk-len's default, when CONFIG GET is not allowed
MIN_VERSION = (7, 0)  # scripts with a shebang (refused before they start when out of memory)
_GENERATION = re.compile(r"b(\d+)-")  # a batch id starts with its generation (next_batch._new_batch_id)




def generation_of(batch_id: str) -> int:
    """The batch's generation, the number its id starts with: it grows with every batch and every reset."""
    match = _GENERATION.match(batch_id)
    if match is None:
        raise SinkRejectedError(f"Redis sink: batch id {batch_id!r} does not start with b<generation>-")
    return int(match.group(1))


def pieces(batch: Entries) -> Iterator[range]:
    """`batch`'s entries cut in runs of at most PIECE_ENTRIES entries and PIECE_BYTES of arguments, in order."""
    return piece_bounds(batch.sizes, PIECE_ENTRIES, PIECE_BYTES)


@dataclass(frozen=True)
class Appended:
    """What one chunk's write did: entries appended, entries the stream already held, the ids appended."""

    appended: int
    skipped: int
    first_id: str
    last_id: str


class _Connection:
    """One connection to the server, its stream checked at open."""

    def __init__(self, target: RedisTarget) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.target = target
        tls = target.tls
        # no retries of its own: a failed piece fails the chunk, whose replay skips what landed
        self.client = redis.Redis(
            host=target.host,
            port=target.port,
            db=target.db,
            username=target.username,
            password=target.password,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=REPLY_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),
            client_name="icetail",
            ssl=tls is not None,
            ssl_ca_certs=tls.ca if tls is not None else None,
            ssl_certfile=tls.cert if tls is not None else None,
            ssl_keyfile=tls.key if tls is not None else None,
        )
        self.max_message = target.max_message_bytes or SERVER_LIMIT
        self._script: Any = None

    def check(self, *, create: bool) -> None:
        """The server answers, is 7.0 or later, and the key is a stream (or missing, with `create`)."""
        where, stream = self.target.where, self.target.stream
        if self.target.tls is not None:
            self.target.tls.context()  # a file that cannot be used: one line naming its parameter
        with _mapped(self.target):
            self.client.ping()
            version = self._version()
            if version is not None and version < MIN_VERSION:
                raise SinkSetupError(
                    f"Redis server {where} is version {'.'.join(map(str, version))}; the Redis stream sink needs "
                    f"{'.'.join(map(str, MIN_VERSION))} or later: upgrade it"
                )
            kind = self.client.type(stream)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            if kind == "none" and not create:
                raise StreamMissingError(
                    f"Redis stream {stream!r} does not exist on {where}: create it (XGROUP CREATE {stream} "
                    "readers $ MKSTREAM) or add ?create=true to the sink URL"
                )
            if kind not in ("none", "stream"):
                raise ConfigError(_wrong_type(self.target, kind))
            server = self._server_limit()
            if server is not None:
                self.max_message = min(self.max_message, server)
            self._script = self.client.register_script(APPEND)

    def _version(self) -> tuple[int, ...] | None:
        import redis

        try:
            info: dict[str, Any] = self.client.info("server")  # type: ignore[assignment]  # sync client
            text = str(info.get("redis_version", ""))
        except redis.exceptions.NoPermissionError:
            return None
        numbers = [int(n) for n in re.findall(r"\d+", text)[:2]]
        return tuple(numbers) if len(numbers) == 2 else None

    def _server_limit(self) -> int | None:
        """proto-max-bulk-len, the largest string the server takes; None when CONFIG is not allowed."""
        import redis

        try:
            config: dict[str, Any] = self.client.config_get("proto-max-bulk-len")  # type: ignore[assignment]
            value = config.get("proto-max-bulk-len")
        except redis.exceptions.ResponseError:  # NOPERM, or CONFIG renamed away
            return None
        return int(value) if value else None

    def append(self, consumer: str, batch_id: str, batch: Entries) -> Appended:
        """Run the script on each piece of `batch` in order (script.py)."""
        target = self.target
        keys = [target.stream, marks_key(target.stream)]
        head: list[str | bytes] = [consumer, batch_id, str(generation_of(batch_id)), "1" if target.create else "0"]
        head += [str(target.maxlen) if target.maxlen is not None else ""]
        head += [str(batch.key.split_index), str(batch.key.row_start_inclusive)]
        appended = skipped = 0
        first = last = ""
        with _mapped(target):
            for piece in pieces(batch):
                start, stop = piece.start, piece.stop
                args = [*head, str(start), str(stop - start), str(len(batch.columns))]
                for column in batch.columns:
                    args += [column.name, "0" if column.one is not None else "1", column.values(start, stop)]
                args.append(batch.envelope.values(start, stop))
                done, already, first_id, last_id = self._script(keys=keys, args=args)
                appended += int(done)
                skipped += int(already)
                first = first or _text(first_id)
                last = _text(last_id) or last
        return Appended(appended, skipped, first, last)

    def close(self) -> None:
        self.client.close()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


class _mapped:
    """redis-py's errors as icetail's, one line each naming the fix."""

    def __init__(self, target: RedisTarget) -> None:
        self.target = target

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        mapped = _icetail_error(self.target, exc)
        if mapped is not None:
            raise mapped from exc


def _icetail_error(target: RedisTarget, exc: Exception) -> Exception | None:
    import redis.exceptions as rx

    where, stream = target.where, target.stream
    text = error_text(exc)
    if isinstance(exc, rx.AuthenticationError) or "WRONGPASS" in text or "NOAUTH" in text:
        return SinkSetupError(
            f"Redis server {where} refused the sink's credentials ({text}): fix USER:PASSWORD in the sink URL"
        )
    if isinstance(exc, rx.NoPermissionError):
        return SinkSetupError(
            f"Redis server {where} does not let the sink's user do this ({text}): grant it +@stream +evalsha "
            f"+script +type +hset +hget +ping on keys {stream} and {marks_key(stream)} (ACL SETUSER)"
        )
    if isinstance(exc, rx.ReadOnlyError):
        return SinkSetupError(f"Redis server {where} is a read-only replica: point the sink URL at the primary")
    if isinstance(exc, rx.OutOfMemoryError):
        return SinkError(
            f"Redis server {where} is out of memory ({text}): raise its maxmemory, or trim the stream (maxlen=)"
        )
    refused = handshake_refusal(f"Redis server {where}", exc) if target.tls is not None else None
    if refused is not None:
        return refused
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError, rx.BusyLoadingError)):
        return SinkError(f"Redis server {where} cannot be reached ({text}): start it, or fix HOST:PORT in the sink URL")
    if isinstance(exc, rx.ResponseError):
        raw = str(exc)  # the script's own errors: ICETAIL-WHAT DETAIL
        if raw.startswith("ICETAIL-MISSING"):
            return SinkRejectedError(
                f"Redis stream {stream!r} no longer exists on {where} (deleted?): recreate it, or add "
                "?create=true to the sink URL"
            )
        if raw.startswith("ICETAIL-WRONGTYPE"):
            return SinkRejectedError(_wrong_type(target, raw.split()[-1]))
        if raw.startswith("ICETAIL-BEHIND"):
            return SinkError(
                f"Redis stream {stream!r} on {where} already holds this consumer's later batch "
                f"{raw.split()[-1]}: the consumer was re-created under the same id, or this replica lost its "
                f"lease; for a re-created consumer use a new stream key or HDEL {marks_key(stream)} CONSUMER"
            )
        return SinkError(f"Redis server {where} refused the stream write: {text}")
    return None


def _wrong_type(target: RedisTarget, kind: str) -> str:
    return (
        f"Redis key {target.stream!r} on {target.where} holds a {kind}, not a stream: name another key in the sink URL"
    )


def _too_large(target: RedisTarget, size: int, limit: int) -> str:
    return (
        f"Redis sink: a change's envelope is {size} bytes, over the {limit} bytes allowed for stream "
        f"{target.stream!r} on {target.where}: raise max_message_bytes= in the sink URL (or the server's "
        "proto-max-bulk-len)"
    )


def _opening(target: RedisTarget) -> Opening[_Connection]:
    return Opening(
        f"Redis server {target.where}",
        lambda: _Connection(target),
        lambda connection, create: connection.check(create=create),
        lambda connection: connection.close(),
    )


class RedisStreamSink(BusSink[_Connection]):
    """Appends each chunk's envelope records to a Redis stream (module docstring); exactly once.

    It takes Debezium envelopes only, and opens, drops and closes its connection, as BusSink says.
    """

    def __init__(self, target: RedisTarget, *, consumer: str) -> None:
        self.target = target
        super().__init__(_opening(target), consumer=consumer, create=target.create)

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """Append the records `rows` (envelopes) the stream lacks; the token names the ids appended."""
        if self._closed:
            raise SinkRejectedError(f"Redis sink {self.target.identity} is closed")
        if key.consumer != self.consumer:
            raise ConfigError(f"Redis sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}")
        if "source" not in rows.column_names:
            raise SinkRejectedError(
                "the Redis sink takes Debezium envelopes: open it with open_sink(url, consumer=..., table='NS.TABLE')"
            )
        batch = entries(key, rows, self.target.key)
        if batch is None:
            return None
        if self._connection is None:
            self._connection = self._open(create=self.target.create)
        connection = self._connection
        largest = int(batch.envelope_sizes.max())
        if largest > connection.max_message:
            raise SinkRejectedError(_too_large(self.target, largest, connection.max_message))
        try:
            done = connection.append(self.consumer, key.batch_id, batch)
        except BaseException:
            self._drop_connection()  # the replay starts on a fresh connection
            raise
        self.duplicates += done.skipped
        stream = self.target.stream
        return f"{stream}:{done.first_id}..{done.last_id}" if done.appended else f"{stream}:held"

def check_reachable(target: RedisTarget) -> None:
    """Reach the server and the stream without changing anything (a missing stream passes with create=true)."""
    _opening(target).reach(created_later=target.create)
