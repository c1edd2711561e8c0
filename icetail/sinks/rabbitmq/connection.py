"""One connection to a RabbitMQ stream port (rstream's protocol client; async, runs on AsyncLoop).

It publishes under one producer at a time (publisher id 0 of the connection): the name a chunk's
ids belong to (ids.py) is declared when the chunk's name differs from the last one, and the
highest id the broker stored under it is asked for then (`query_publisher_sequence`), so a
replayed chunk sends only what the stream lacks. The broker's own de-duplication covers the rest
(a message sent twice through a race is dropped and confirmed). rstream's Producer is not used:
it reconnects and re-sends on its own, which would reorder a chunk after a lost connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from icetail.kernel.errors import SinkError, SinkRejectedError, SinkSetupError, error_text
from icetail.sinks.bus.opening import StreamMissingError
from icetail.sinks.bus.tls import handshake_refusal
from icetail.sinks.rabbitmq.frames import MESSAGE_OVERHEAD, PUBLISH_FRAME_OVERHEAD, Part
from icetail.sinks.rabbitmq.url import RabbitStreamTarget

__all__ = ["MESSAGE_OVERHEAD", "PUBLISH_FRAME_OVERHEAD", "StreamConnection", "StreamMissingError"]

CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 10.0
HEARTBEAT_SECONDS = 60
REQUESTED_FRAME_MAX = 64 << 20  # the broker's stream.frame_max (1 MiB by default) is what holds
MAX_MESSAGES_PER_FRAME = 1000
PUBLISHER_ID = 0


class StreamConnection:
    """A connection, authenticated, with the stream checked; publishes chunks and awaits their confirms."""

    def __init__(self, target: RabbitStreamTarget) -> None:
        self.target = target
        self.client: Any = None
        self.frame_max = 0
        self.producer: str | None = None  # the producer name declared as PUBLISHER_ID
        self.stored = 0  # the highest publishing id the broker holds under `producer`
        self._waiting: set[int] = set()  # ids sent, not confirmed yet
        self._sending = False  # a chunk's parts are still being sent: confirming all so far is not the end
        self._sent = self._held = self._last_sent = 0
        self._confirmed: asyncio.Future[None] | None = None
        self._lost: str | None = None

    async def connect(self) -> None:
        from rstream import exceptions
        from rstream.client import Client
        from rstream.connection import ConnectionClosed

        target, where = self.target, self.target.where
        client = Client(
            target.host,
            target.port,
            frame_max=REQUESTED_FRAME_MAX,
            heartbeat=HEARTBEAT_SECONDS,
            connection_name="icetail",
            connection_closed_handler=self._on_closed,
            ssl_context=target.tls.context() if target.tls is not None else None,
        )
        self.client = client
        try:
            await asyncio.wait_for(client.start(), CONNECT_TIMEOUT_SECONDS)
            await asyncio.wait_for(
                client.authenticate(target.vhost, target.user, target.password), REQUEST_TIMEOUT_SECONDS
            )
        except (exceptions.AuthenticationFailure, exceptions.SASLAuthenticationFailureLoopback) as exc:
            loopback = isinstance(exc, exceptions.SASLAuthenticationFailureLoopback)
            raise SinkSetupError(
                f"RabbitMQ {where} refused the sink's credentials for user {target.user!r} ({type(exc).__name__}): "
                + (
                    "that user may connect from localhost only; create a user (rabbitmqctl add_user) and name it"
                    if loopback
                    else "fix USER:PASSWORD in the sink URL"
                )
            ) from None
        except exceptions.VirtualHostAccessFailure:
            raise SinkSetupError(
                f"RabbitMQ {where}: user {target.user!r} may not use virtual host {target.vhost!r}: fix vhost= in the "
                f"sink URL or grant it (rabbitmqctl set_permissions -p {target.vhost} {target.user} '.*' '.*' '.*')"
            ) from None
        except (OSError, asyncio.TimeoutError, ConnectionClosed, exceptions.ServerError) as exc:
            refused = handshake_refusal(f"RabbitMQ stream port {where}", exc)
            if refused is not None:
                raise refused from None
            raise SinkError(
                f"RabbitMQ stream port {where} cannot be reached ({error_text(exc)}): start RabbitMQ with the stream "
                "plugin (rabbitmq-plugins enable rabbitmq_stream), or fix HOST:PORT in the sink URL"
            ) from None
        client.add_stream(target.stream)  # a lost connection is then told to _on_closed, not logged
        client.add_handler(_frame("PublishConfirm"), self._on_confirm, name="icetail")
        client.add_handler(_frame("PublishError"), self._on_error, name="icetail")
        client.add_handler(_frame("MetadataUpdate"), self._on_metadata_update, name="icetail")
        self.frame_max = int(client.frame_max)

    async def check_stream(self, *, create: bool) -> None:
        """The stream exists, or is created with `create`; StreamMissingError naming the fix otherwise."""
        from rstream import exceptions

        stream, where = self.target.stream, self.target.where
        try:
            if await self.client.stream_exists(stream):
                return
            if not create:
                raise StreamMissingError(
                    f"RabbitMQ stream {stream!r} does not exist on {where} (vhost {self.target.vhost!r}): create it "
                    f"(rabbitmqadmin declare queue name={stream} queue_type=stream) or add "
                    f"{'&' if '?' in self.target.identity else '?'}create=true to the sink URL"
                )
            try:
                await self.client.create_stream(stream)
            except exceptions.StreamAlreadyExists:
                pass  # made meanwhile by another run
        except exceptions.AccessRefused:
            raise SinkSetupError(
                f"RabbitMQ {where}: user {self.target.user!r} may not {'create' if create else 'use'} stream "
                f"{stream!r}: grant it configure and write permissions (rabbitmqctl set_permissions)"
            ) from None
        except (OSError, asyncio.TimeoutError, exceptions.ServerError) as exc:
            raise SinkError(f"RabbitMQ {where}: reading stream {stream!r} failed: {error_text(exc)}") from exc

    async def begin(self, producer: str) -> None:
        """Start a chunk under `producer`: declared, the highest id stored under it asked for."""
        await self._declare(producer)
        self._settle()
        self._waiting, self._sending, self._sent, self._held = set(), True, 0, 0
        self._confirmed = asyncio.get_running_loop().create_future()

    async def send(self, part: Part) -> None:
        """Send the part's messages the stream lacks (a later part's while its confirms come back), in
        frames of at most frame_max bytes and MAX_MESSAGES_PER_FRAME messages."""
        skip = min(part.count, max(0, self.stored - part.first_id + 1))
        self._held += skip
        if skip == part.count:
            return
        self._waiting.update(range(part.first_id + skip, part.last_id + 1))
        self._sent += part.count - skip
        self._last_sent = part.last_id
        for start, stop in part.frames(skip, self.frame_max, MAX_MESSAGES_PER_FRAME):
            await self._send_frame(part, start, stop)

    async def finish(self) -> tuple[int, int]:
        """Await every confirm of the chunk: (sent, already stored)."""
        confirmed = self._confirmed
        assert confirmed is not None, "finish() without begin()"
        self._sending = False
        try:
            if self._waiting:
                await confirmed
            elif confirmed.done():
                confirmed.result()  # a publish error told after the last message was confirmed
        finally:
            self._settle()
        if self._sent:
            self.stored = self._last_sent
        return self._sent, self._held

    def _settle(self) -> None:
        """The chunk's confirm future dropped, its error retrieved (no "never retrieved" warning)."""
        confirmed, self._confirmed = self._confirmed, None
        if confirmed is not None and confirmed.done() and not confirmed.cancelled():
            confirmed.exception()

    async def _declare(self, producer: str) -> None:
        from rstream import exceptions

        if self.producer == producer:
            return
        where, stream = self.target.where, self.target.stream
        try:
            if self.producer is not None:
                self.producer = None
                await self.client.delete_publisher(PUBLISHER_ID)
            await self.client.declare_publisher(stream=stream, reference=producer, publisher_id=PUBLISHER_ID)
            self.stored = int(await self.client.query_publisher_sequence(stream=stream, reference=producer))
        except exceptions.StreamDoesNotExist:
            raise SinkError(
                f"RabbitMQ stream {stream!r} on {where} is gone (deleted since the run began): create it again "
                "or fix the sink URL"
            ) from None
        except exceptions.AccessRefused:
            raise SinkSetupError(
                f"RabbitMQ {where}: user {self.target.user!r} may not write to stream {stream!r}: grant it write "
                "permission (rabbitmqctl set_permissions)"
            ) from None
        except (OSError, asyncio.TimeoutError, exceptions.ServerError) as exc:
            raise SinkError(f"RabbitMQ {where}: declaring producer {producer!r} failed: {error_text(exc)}") from exc
        self.producer = producer

    async def _send_frame(self, part: Part, start: int, stop: int) -> None:
        if self._lost is None and self.client.is_connection_alive():
            write = raw_writer(self.client)
            try:
                if write is not None:
                    await write(part.frame(PUBLISHER_ID, start, stop))
                else:  # an rstream without the raw write: its own encoding of the same frame
                    await self.client.send_publish_frame(_publish(part, start, stop))
            except OSError as exc:
                self._lost = error_text(exc)
        if self._lost is not None or not self.client.is_connection_alive():  # rstream swallows a socket error
            raise SinkError(self._lost_text(self._lost or "the connection closed"))
        if self._confirmed is not None and self._confirmed.done():
            self._confirmed.result()  # a publish error already told: raise it now

    def _lost_text(self, reason: str) -> str:
        return (
            f"RabbitMQ stream sink: the connection to {self.target.where} was lost before every message was "
            f"confirmed ({reason}); the chunk is published again on the next attempt"
        )

    def _fail(self, error: Exception) -> None:
        if self._confirmed is not None and not self._confirmed.done():
            self._confirmed.set_exception(error)

    def _on_confirm(self, frame: Any) -> None:
        if frame.publisher_id != PUBLISHER_ID:
            return
        self._waiting.difference_update(frame.publishing_ids)
        if not self._waiting and not self._sending and self._confirmed is not None and not self._confirmed.done():
            self._confirmed.set_result(None)

    def _on_error(self, frame: Any) -> None:
        from rstream import exceptions

        if frame.publisher_id != PUBLISHER_ID or not frame.errors:
            return
        error = frame.errors[0]
        kind = exceptions.ServerError.from_code(error.response_code).__name__
        stream, where = self.target.stream, self.target.where
        if kind == "AccessRefused":
            self._fail(SinkRejectedError(f"RabbitMQ {where} refused a message for stream {stream!r} ({kind}): grant "
                                         f"user {self.target.user!r} write permission"))  # fmt: skip
        else:
            code = error.response_code
            self._fail(SinkError(f"RabbitMQ {where} did not store a message for stream {stream!r} ({kind}, code "
                                 f"{code}); the chunk is published again on the next attempt"))  # fmt: skip

    def _on_metadata_update(self, frame: Any) -> None:
        self._lost = f"stream {self.target.stream!r} was deleted or moved"
        self._fail(SinkError(self._lost_text(self._lost)))

    def _on_closed(self, info: Any) -> None:
        self._lost = f"{info.reason}"
        self._fail(SinkError(self._lost_text(self._lost)))

    @property
    def closed(self) -> bool:
        return self.client is None or self._lost is not None or not self.client.is_connection_alive()

    async def close(self) -> None:
        self._settle()
        client, self.client = self.client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), REQUEST_TIMEOUT_SECONDS)
            except Exception:  # closing a broken connection: nothing is left to flush
                pass


def raw_writer(client: Any) -> Any:
    """rstream's write of a frame's bytes (the connection's `_write_frame_raw`, rstream 1.x), or None."""
    return getattr(getattr(client, "_conn", None), "_write_frame_raw", None)


def _publish(part: Part, start: int, stop: int) -> Any:
    from rstream import schema

    messages = [
        schema.Message(publishing_id=part.first_id + i, filter_value=None, data=part.message(i))
        for i in range(start, stop)
    ]
    return schema.Publish(publisher_id=PUBLISHER_ID, messages=messages)


def _frame(name: str) -> Any:
    from rstream import schema

    return getattr(schema, name)
