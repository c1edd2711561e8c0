"""One small HTTP endpoint for operators: /metrics, /healthz and /readyz on one host and port.

* `/metrics`: the registry in the Prometheus text format (or OpenMetrics when the scraper asks
  for it in `Accept`), gzip when accepted, `?name[]=` to restrict to some metric families;
  without client_python's `_created` samples (`_WithoutCreated`).
* `/healthz`: 200 "ok" as long as the process serves HTTP (liveness).
* `/readyz`: 200 with the reason when the readiness callable returns `(True, reason)`,
  503 with the reason otherwise, or when it raises (readiness).

It is stdlib `ThreadingHTTPServer` in a daemon thread: it never keeps the process alive.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["MonitorServer", "Readiness", "always_ready"]

log = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, str]]


def always_ready() -> tuple[bool, str]:
    return True, "ok"


# the metric types for which client_python adds a `<name>_created` sample per child
_WITH_CREATED = ("counter", "histogram", "summary", "gaugehistogram")


class _WithoutCreated(CollectorRegistry):
    """A registry's metrics as exposed: without the `_created` sample of each counter and histogram.

    client_python adds to every counter and histogram child a `_created` sample (when it was
    made), and Prometheus stores it as one more series per child, holding the process start
    again (`process_start_time_seconds`), which no icetail alert or dashboard reads. Its own
    switches are process-wide (`disable_created_metrics()`, `PROMETHEUS_DISABLE_CREATED_SERIES`
    read at its import), which would change the metrics of an application that embeds icetail;
    so the samples are left out here, for icetail's endpoint only.
    """

    def __init__(self, collector: Collector) -> None:
        super().__init__(auto_describe=False)
        self._source = collector

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            if family.type in _WITH_CREATED:
                created = f"{family.name}_created"
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = [sample for sample in family.samples if sample.name != created]
                family = kept
            yield family


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # listen backlog; socketserver's default of 5 drops bursts of connects

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, readiness: Readiness) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.registry = registry
        self.readiness = readiness
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "icetail"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (stdlib naming)
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch(send_body=False)

    def _dispatch(self, *, send_body: bool) -> None:
        url = urlsplit(self.path)
        if url.path == "/metrics":
            self._metrics(parse_qs(url.query), send_body)
        elif url.path == "/healthz":
            self._reply(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8", send_body)
        elif url.path == "/readyz":
            ready, reason = self._readiness()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._reply(status, f"{reason}\n".encode(), "text/plain; charset=utf-8", send_body)
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"not found: try /metrics, /healthz, /readyz\n", "text/plain", send_body)

    def _readiness(self) -> tuple[bool, str]:
        try:
            ready, reason = self.server.readiness()
        except Exception as exc:  # a broken check means not ready, never a dead endpoint
            log.warning("readiness check raised", exc_info=True)
            return False, f"readiness check failed: {type(exc).__name__}: {exc}"
        return bool(ready), str(reason) or ("ready" if ready else "not ready")

    def _metrics(self, params: dict[str, list[str]], send_body: bool) -> None:
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        registry = self.server.registry
        try:
            if "name[]" in params:
                output = encoder(_WithoutCreated(registry.restricted_registry(params["name[]"])))
            else:
                output = encoder(_WithoutCreated(registry))
        except Exception:
            log.exception("collecting metrics failed")
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, b"collecting metrics failed\n", "text/plain", send_body)
            return
        encoding = None
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            output = gzip.compress(output)
            encoding = "gzip"
        self._reply(HTTPStatus.OK, output, content_type, send_body, encoding)

    def _reply(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        send_body: bool,
        encoding: str | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s - %s", self.address_string(), format % args)


class MonitorServer:
    """Serves /metrics, /healthz and /readyz for `registry` until `stop()`."""

    def __init__(self, registry: CollectorRegistry, readiness: Readiness | None = None) -> None:
        self.registry = registry
        self.readiness: Readiness = readiness or always_ready
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int | None:
        return None if self._server is None else int(self._server.server_address[1])

    def start(self, host: str = "0.0.0.0", port: int = 9464) -> tuple[ThreadingHTTPServer, int]:
        """Bind `host:port` (port 0 picks a free one) and serve in a daemon thread.

        Returns the server and the port actually bound. Raises OSError when the port is taken.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("MonitorServer is already started")
            server = _Server((host, port), self.registry, self._ready)
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"icetail-http-{server.server_address[1]}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
        actual = int(server.server_address[1])
        log.info("serving /metrics, /healthz, /readyz on %s:%d", host, actual)
        return server, actual

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; a no-op when not started."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout)

    def _ready(self) -> tuple[bool, str]:
        # indirection so `readiness` can be swapped after start (e.g. once the first poll is done)
        return self.readiness()

    def __enter__(self) -> MonitorServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
