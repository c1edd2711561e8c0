"""A TCP proxy in front of PostgreSQL or the S3 server that the harness can hurt: `cut` drops every
live connection at once and refuses new ones for a while (the server restarted or stopped, the
network dropped); `slow` delays every answer for a while (a server slower than the client's
timeouts); `throttle` answers every HTTP request with S3's `503 SlowDown` for a while.

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
        self._slow_until = 0.0
        self._delay = 0.0
        self._throttle_until = 0.0
        self._closed = False
        self.throttled = 0  # requests answered 503
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

    def slow(self, seconds: float, delay: float) -> int:
        """For `seconds`, hold every piece of every answer `delay` s before passing it on; open connections."""
        with self._lock:
            self._delay = delay
            self._slow_until = time.monotonic() + seconds
            return len(self._sockets) // 2

    def throttle(self, seconds: float) -> int:
        """For `seconds`, answer every HTTP request 503 SlowDown (open connections are cut, so that the
        client reconnects into the throttle); how many were cut."""
        with self._lock:
            self._throttle_until = time.monotonic() + seconds
        return self.cut(0)

    def wait_up(self) -> None:
        """Until the last fault is over: a run it did not hurt must not start inside it."""
        while (left := max(self._down_until, self._slow_until, self._throttle_until) - time.monotonic()) > 0:
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
            if time.monotonic() < self._throttle_until:
                threading.Thread(target=self._slow_down, args=(client,), daemon=True).start()
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
            for a, b, answers in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(a, b, answers), daemon=True).start()

    def _slow_down(self, client: socket.socket) -> None:
        """Read one HTTP request (headers and a Content-Length body) and answer it 503 SlowDown."""
        try:
            client.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                more = client.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                (int(v) for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "content-length"), 0
            )
            while len(body) < length and (more := client.recv(65536)):
                body += more
            xml = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                b"<Message>Please reduce your request rate.</Message><RequestId>chaos</RequestId></Error>"
            )
            payload = b"" if lines[0].startswith("HEAD ") else xml
            client.sendall(
                b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            self.throttled += 1
        except (OSError, ValueError):
            pass
        finally:
            _close(client)

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers and time.monotonic() < self._slow_until:
                    time.sleep(self._delay)  # an answer held back: the client's timeouts run
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
