"""How a bus sink opens, keeps and closes its one connection: opened and its stream checked (closed
again when either fails), dropped after a failed chunk so the replay starts on a fresh one, closed
once with the sink; and what the NATS, Redis and RabbitMQ sinks are alike (BusSink). Each of them
wrote this its own way before."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from icetail.kernel.errors import ConfigError, SinkError
from icetail.kernel.names import check_consumer_id
from icetail.sinks.bus.loop import AsyncLoop

C = TypeVar("C")


class StreamMissingError(ConfigError):
    """The stream the URL names does not exist (and the URL does not ask to create it)."""


class AsyncConnection(Protocol):
    """A connection whose opening steps are coroutines (nats-py, rstream), run on the sink's AsyncLoop."""

    async def connect(self) -> None: ...

    async def check_stream(self, *, create: bool) -> None: ...

    async def close(self) -> None: ...


A = TypeVar("A", bound=AsyncConnection)


@dataclass(frozen=True)
class Opening(Generic[C]):
    """The steps of opening one connection of a sink; `server` names who did not answer in time
    (`NATS server HOST:PORT`)."""

    server: str
    new: Callable[[], C]  # no I/O
    check: Callable[[C, bool], None]  # connect and check the stream (creating it when told): IcetailError
    shut: Callable[[C], None]  # close it; errors of a broken connection are the caller's to ignore

    def open(self, *, create: bool) -> C:
        """A connection with its stream checked; closed again if that fails."""
        connection = self.new()
        try:
            self.check(connection, create)
        except BaseException as exc:
            self.close(connection)
            if isinstance(exc, TimeoutError):
                raise SinkError(f"{self.server} did not answer in time") from exc
            raise
        return connection

    def close(self, connection: C) -> None:
        try:
            self.shut(connection)
        except Exception:  # closing a broken connection: nothing is left to flush
            pass

    def reach(self, *, created_later: bool) -> None:
        """Reach the server and the stream without changing anything; a missing stream passes when the
        run creates it as it opens the sink (`created_later`, the URL's create=true)."""
        try:
            connection = self.open(create=False)
        except StreamMissingError:
            if not created_later:
                raise
        else:
            self.close(connection)


def on_loop(
    server: str,
    loop: AsyncLoop,
    new: Callable[[], A],
    *,
    connect_seconds: float,
    check_seconds: float,
    close_seconds: float,
) -> Opening[A]:
    """The Opening of an AsyncConnection whose steps run on `loop`, each within its own time."""

    def check(connection: A, create: bool) -> None:
        loop.run(connection.connect(), connect_seconds)
        loop.run(connection.check_stream(create=create), check_seconds)

    def shut(connection: A) -> None:
        loop.run(connection.close(), close_seconds)

    return Opening(server, new, check, shut)


class BusSink(Generic[C]):
    """What every bus sink is besides its publishing: exactly once, fed Debezium envelopes only
    (`envelopes_only`: registry.formatted puts the envelope around it whatever `--format` says), for
    one consumer, counting what replays found already there; its connection, one at a time
    (`_connection`), and the loop its client runs on, if any."""

    exactly_once: bool = True
    envelopes_only: bool = True

    def __init__(self, opening: Opening[C], *, consumer: str, create: bool, loop: AsyncLoop | None = None) -> None:
        self.consumer = check_consumer_id(consumer)
        self.duplicates = 0  # messages (entries) of replayed chunks the stream already held
        self._opening = opening
        self._owned_loop = loop
        self._connection: C | None = None
        self._closed = False
        try:
            self._connection = opening.open(create=create)
        except BaseException:
            if loop is not None:
                loop.stop()
            raise

    def _open(self, *, create: bool) -> C:
        return self._opening.open(create=create)

    def _drop_connection(self) -> None:
        """After a failed chunk: the next write starts on a fresh connection (its replay stays in order)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._opening.close(connection)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._drop_connection()
        finally:
            if self._owned_loop is not None:
                self._owned_loop.stop()
