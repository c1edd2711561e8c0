"""A TCP proxy in front of PostgreSQL that the harness can cut: every live connection is dropped
at once and new ones are refused for a while, as when the server restarts or the network drops.

Threads, not asyncio: two pumps per connection, a few connections per trial.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class CuttableProxy:
    """Listens on 127.0.0.1:<port> and forwards to `upstream`; `cut(seconds)` drops everything."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._down_until = 0.0
        self._closed = False
        self.connections = 0
        self.cuts = 0
        self.dropped = 0  # connections cut while open
        threading.Thread(target=self._accept, name="chaos-proxy", daemon=True).start()

    def cut(self, seconds: float) -> int:
        """Drop every open connection and refuse new ones for `seconds`; how many were dropped."""
        with self._lock:
            self._down_until = time.monotonic() + seconds
            victims = list(self._sockets)
            self._sockets.clear()
            self.cuts += 1
        for s in victims:
            _close(s)
        dropped = len(victims) // 2
        self.dropped += dropped
        return dropped

    def wait_up(self) -> None:
        """Until the outage of the last cut is over: a run it did not hurt must not start inside it."""
        while (left := self._down_until - time.monotonic()) > 0:
            time.sleep(left)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.cut(0)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                _close(client)  # refused while down: the client sees the connection closed at once
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, server))
                self.connections += 1
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.discard(src)
                self._sockets.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
