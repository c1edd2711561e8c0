"""Changes onto a RabbitMQ stream, one Debezium envelope per message (messages.py), exactly once.

**Exactly once.** The pipeline writes a chunk, then commits its offset; a crash between the two
replays the chunk under the same key. Every message carries a publishing id under a named producer
(ids.py), the same on a replay, and the broker stores at most one message per (producer, id): a
replayed chunk's messages the stream already holds are skipped (the broker is asked for the
highest id it stored under the name) or, sent through a race, dropped by the broker. `write`
returns only when the broker confirmed every message it sent, so a chunk whose offset is
committed is stored whole. Two `serve` replicas publish the same chunk under the same name and ids,
so one taking over a dead one's consumer replays without duplicates too.

**Order.** A chunk's messages go on one connection in delivery order (change-ordinal order; an
update pair is one message), their confirms awaited before the next chunk, so the stream holds
each key's changes of a table in order. The connection never reconnects by itself: a lost one
fails the chunk (SinkError), the next write opens a new connection and sends what the stream
lacks, still in order.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import pyarrow as pa

from icetail.kernel.errors import ConfigError, IcetailError, SinkError, SinkRejectedError
from icetail.sinks.base import ChunkKey
from icetail.sinks.bus.loop import AsyncLoop
from icetail.sinks.bus.opening import BusSink, Opening, on_loop
from icetail.sinks.rabbitmq.connection import (
    CONNECT_TIMEOUT_SECONDS,
    MESSAGE_OVERHEAD,
    PUBLISH_FRAME_OVERHEAD,
    REQUEST_TIMEOUT_SECONDS,
    StreamConnection,
)
from icetail.sinks.rabbitmq.frames import Part, encoded_parts
from icetail.sinks.rabbitmq.ids import producer_name
from icetail.sinks.rabbitmq.url import RabbitStreamTarget

CONFIRM_TIMEOUT_SECONDS = 30.0  # a chunk's wait grows with its size (write)


def _opening(target: RabbitStreamTarget, loop: AsyncLoop) -> Opening[StreamConnection]:
    return on_loop(
        f"RabbitMQ stream port {target.where}",
        loop,
        lambda: StreamConnection(target),
        connect_seconds=CONNECT_TIMEOUT_SECONDS + REQUEST_TIMEOUT_SECONDS + 1,
        check_seconds=REQUEST_TIMEOUT_SECONDS * 2,
        close_seconds=REQUEST_TIMEOUT_SECONDS + 1,
    )


class RabbitStreamSink(BusSink[StreamConnection]):
    """Publishes each chunk's envelope records to a RabbitMQ stream (module docstring); exactly once.

    It takes Debezium envelopes only, and opens, drops and closes its connection, as BusSink says.
    """

    def __init__(self, target: RabbitStreamTarget, *, consumer: str) -> None:
        self.target = target
        self._loop = AsyncLoop("icetail-rabbitmq")
        super().__init__(_opening(target, self._loop), consumer=consumer, create=target.create, loop=self._loop)

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """Publish the records `rows` (envelopes) and await their confirms; the token names the producer and ids."""
        if self._closed:
            raise SinkRejectedError(f"RabbitMQ stream sink {self.target.identity} is closed")
        if key.consumer != self.consumer:
            raise ConfigError(
                f"RabbitMQ stream sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}"
            )
        if "source" not in rows.column_names:
            raise SinkRejectedError(
                "the RabbitMQ stream sink takes Debezium envelopes: open it with open_sink(url, consumer=..., "
                "table='NS.TABLE')"
            )
        parts = encoded_parts(key, rows, self.target.key)
        first = next(parts, None)
        if first is None:
            return None
        if self._connection is None or self._connection.closed:
            self._drop_connection()
            self._connection = self._open(create=False)  # a stream deleted since is refused, not made again
        name = producer_name(key)
        budget = CONFIRM_TIMEOUT_SECONDS + rows.num_rows / 1000  # a chunk of a million messages gets ~17 minutes
        try:
            sent, stored = self._publish(self._connection, name, itertools.chain([first], parts), budget)
        except IcetailError:
            self._drop_connection()
            raise
        except TimeoutError:
            self._drop_connection()
            raise SinkError(
                f"RabbitMQ stream sink: chunk {key.name} was not confirmed by {self.target.where} within {budget:.0f}s"
            ) from None
        self.duplicates += stored
        last_id = first.first_id + rows.num_rows - 1
        return f"{self.target.stream}:{name}:{first.first_id}-{last_id}"

    def _publish(
        self, connection: StreamConnection, name: str, parts: Iterator[Part], budget: float
    ) -> tuple[int, int]:
        """Send part after part, each encoded (the next `parts`, in this thread: Arrow kernels, the GIL
        released) while the one before it is written on the loop's thread; then await every confirm."""
        deadline = time.monotonic() + budget
        self._loop.run(connection.begin(name), budget)
        sending: Future[None] | None = None
        try:
            for part in parts:
                self._check_size(connection, part)
                if sending is not None:
                    sending.result(max(0.0, deadline - time.monotonic()))
                sending = asyncio.run_coroutine_threadsafe(connection.send(part), self._loop.loop)
            if sending is not None:
                sending.result(max(0.0, deadline - time.monotonic()))
            return self._loop.run(connection.finish(), max(0.0, deadline - time.monotonic()))
        except FutureTimeout:  # Python 3.10's own class (3.11 made it TimeoutError)
            raise TimeoutError from None
        finally:
            if sending is not None and not sending.done():
                sending.cancel()

    def _check_size(self, connection: StreamConnection, part: Part) -> None:
        """Refuse a message no frame holds (before its part is sent: the parts before it are, and a replay
        after stream.frame_max is raised sends only the rest)."""
        limit = connection.frame_max - PUBLISH_FRAME_OVERHEAD - MESSAGE_OVERHEAD
        i = part.largest
        if part.size(i) > limit:
            message_id = part.message_ids[i].as_py()
            raise SinkRejectedError(
                f"RabbitMQ stream sink: message {message_id} is {part.size(i)} bytes, over the {limit} "
                f"one frame of {self.target.where} holds: raise stream.frame_max in rabbitmq.conf (it is "
                f"{connection.frame_max} bytes)"
            )

def check_reachable(target: RabbitStreamTarget) -> None:
    """Reach the broker and the stream without changing anything (a missing stream passes with create=true)."""
    loop = AsyncLoop("icetail-rabbitmq-check")
    try:
        _opening(target, loop).reach(created_later=target.create)
    finally:
        loop.stop()
