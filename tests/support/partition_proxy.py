"""A TCP proxy on 127.0.0.1 that a test cuts, as a network partition between a process and its store.

While cut, nothing is forwarded either way, but every socket stays open: the process's calls hang
(no reset, no error), as they do when a link drops packets. What a client sends meanwhile is kept
and counted (`held_bytes`, `wait_for_held_bytes`: a test sees the moment the process tried to reach
the store), and forwarded once healed, as TCP retransmits it after a partition heals. Replies kept
by the cut are counted too (`held_traffic`, `wait_for_held_traffic`): a client whose call was sent
just before the cut waits for its reply and may send nothing more until the heal (a process that
serializes its store calls then sends nothing at all), yet it is cut off as surely. New
connections are accepted while cut and join the partition.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from types import TracebackType

POLL_SECONDS = 0.05  # how soon a pump notices a cut, a heal or a close; no outcome depends on it


class PartitionProxy:
    """127.0.0.1:`port` forwarded to `target`; `cut()` and `heal()` the link, `close()` it all."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = True
        self._closed = False
        self._changed = threading.Condition()
        self._held = 0
        self._held_replies = 0
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    def __enter__(self) -> PartitionProxy:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # the link -------------------------------------------------------------------------
    def cut(self) -> None:
        with self._changed:
            self._flowing = False

    def heal(self) -> None:
        with self._changed:
            self._flowing = True

    @property
    def held_bytes(self) -> int:
        """Bytes clients sent while cut, since the proxy started."""
        with self._changed:
            return self._held

    @property
    def held_traffic(self) -> tuple[int, int]:
        """(bytes clients sent, bytes of replies to them) kept by a cut, since the proxy started."""
        with self._changed:
            return self._held, self._held_replies

    def wait_for_held_traffic(self, since: tuple[int, int], timeout: float) -> tuple[int, int]:
        """Until a cut kept more than `since` (a `held_traffic`) either way: a client reached for the
        target, or a reply it waits for was held; the counts, or AssertionError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._held <= since[0] and self._held_replies <= since[1]:
                left = deadline - time.monotonic()
                assert left > 0, f"the cut proxy kept nothing either way within {timeout}s"
                self._changed.wait(left)
            return self._held, self._held_replies

    def wait_for_held_bytes(self, more_than: int, timeout: float) -> int:
        """Until clients sent more than `more_than` bytes while cut; the count, or AssertionError."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._held <= more_than:
                left = deadline - time.monotonic()
                assert left > 0, f"no client sent anything through the cut proxy within {timeout}s"
                self._changed.wait(left)
            return self._held

    def close(self) -> None:
        with self._changed:
            self._closed = True
        for sock in [self._listener, *self._sockets]:
            try:
                sock.close()
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)

    # forwarding -----------------------------------------------------------------------
    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="partition-proxy")  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select([self._listener], [], [], POLL_SECONDS)
            except OSError:  # closed (close()) while selecting
                return
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, True)
            self._spawn(self._pump, upstream, client, False)

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        """Copy `source` to `sink`; while cut, keep what arrives (counted when a client sent it)."""
        pending = bytearray()
        try:
            while not self._closed:
                if self._flowing and pending:
                    sink.sendall(pending)
                    pending.clear()
                ready, _, _ = select.select([source], [], [], POLL_SECONDS)
                if not ready:
                    continue
                data = source.recv(65536)
                if not data:
                    break
                with self._changed:
                    if self._flowing and not pending:
                        sink.sendall(data)
                        continue
                    pending += data
                    if not self._flowing:
                        if from_client:
                            self._held += len(data)
                        else:
                            self._held_replies += len(data)
                        self._changed.notify_all()
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
