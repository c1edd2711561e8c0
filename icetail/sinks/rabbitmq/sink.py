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
from icetail.sinks.rabbitmq.ids import producer_name
from icetail.sinks.rabbitmq.messages import stream_messages
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
        batch = stream_messages(key, rows, self.target.key)
        if not batch:
            return None
        if self._connection is None or self._connection.closed:
            self._drop_connection()
            self._connection = self._open(create=False)  # a stream deleted since is refused, not made again
        connection = self._connection
        largest = max(batch, key=lambda m: len(m.data))
        limit = connection.frame_max - PUBLISH_FRAME_OVERHEAD - MESSAGE_OVERHEAD
        if len(largest.data) > limit:
            raise SinkRejectedError(
                f"RabbitMQ stream sink: message {largest.message_id} is {len(largest.data)} bytes, over the {limit} "
                f"one frame of {self.target.where} holds: raise stream.frame_max in rabbitmq.conf (it is "
                f"{connection.frame_max} bytes)"
            )
        name = producer_name(key)
        budget = CONFIRM_TIMEOUT_SECONDS + len(batch) / 1000  # a chunk of a million messages gets ~17 minutes
        try:
            sent, stored = self._loop.run(connection.publish(name, batch), budget)
        except IcetailError:
            self._drop_connection()
            raise
        except TimeoutError:
            self._drop_connection()
            raise SinkError(
                f"RabbitMQ stream sink: chunk {key.name} was not confirmed by {self.target.where} within {budget:.0f}s"
            ) from None
        self.duplicates += stored
        return f"{self.target.stream}:{name}:{batch[0].publishing_id}-{batch[-1].publishing_id}"

def check_reachable(target: RabbitStreamTarget) -> None:
    """Reach the broker and the stream without changing anything (a missing stream passes with create=true)."""
    loop = AsyncLoop("icetail-rabbitmq-check")
    try:
        _opening(target, loop).reach(created_later=target.create)
    finally:
        loop.stop()
