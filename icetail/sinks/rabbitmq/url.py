"""`rabbitmq-stream://[USER[:PASSWORD]@]HOST[:PORT]/STREAM[?vhost=V][&create=true][&key=COL[,COL...]]`,
or `rabbitmq-stream+tls://...` (as RabbitMQ's stream clients name it; port 5551, the broker's
`stream.listeners.ssl`) with `ca=PATH`, `cert=PATH&cert_key=PATH` (bus/tls.py).

Parsed with the standard library only, without side effects and without importing rstream (whose
presence is checked here, kernel/extras.py). The URL speaks RabbitMQ's stream protocol (port 5552),
not AMQP: STREAM is a stream, not a queue. Without USER the broker's default guest:guest is used
(which RabbitMQ accepts from localhost only). `vhost` defaults to `/`. The stream is created only
with `create=true` (a stream made elsewhere is never changed). A password never leaves this module
except inside `password`: the sink's identity, what the state records and `status` prints, is the
URL without it and without `create` (creating is not part of where the changes go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import RABBITMQ, require
from icetail.kernel.secrets import redact_text
from icetail.kernel.url_params import has_control_character
from icetail.sinks.bus.tls import PARAMETERS as TLS_PARAMETERS
from icetail.sinks.bus.tls import Tls, tls_options
from icetail.sinks.bus.url_parts import host_text, key_columns, query_parameters, split_server_url, url_flag

SCHEME = "rabbitmq-stream"
TLS_SCHEME = "rabbitmq-stream+tls"  # the Java, .NET and Go stream clients' name for it
SCHEMES = (SCHEME, TLS_SCHEME)
FORM = (
    "rabbitmq-stream://[USER[:PASSWORD]@]HOST[:PORT]/STREAM[?vhost=V][&create=true][&key=COL[,COL...]] "
    "(rabbitmq-stream+tls://... for TLS, with ca=PATH[&cert=PATH&cert_key=PATH])"
)
PARAMETERS = ("vhost", "create", "key", *TLS_PARAMETERS)
DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
DEFAULT_USER = DEFAULT_PASSWORD = "guest"  # RabbitMQ's default user (localhost only)
_STREAM = re.compile(r"[^\s/]{1,255}")  # a queue name: up to 255 bytes; no slash or space in a URL's path


@dataclass(frozen=True)
class RabbitStreamTarget:
    """Where the sink publishes: the broker, its virtual host and the stream."""

    identity: str  # the normalized URL without any password: recorded per consumer, printed
    host: str
    port: int
    vhost: str
    stream: str
    user: str
    password: str = field(repr=False)  # never printed
    create: bool = False  # create the stream when it is missing
    key: tuple[str, ...] = ()  # key columns: the `Icetail-Key` application property
    tls: Tls | None = None  # rabbitmq-stream+tls://: the connection's TLS files

    def __repr__(self) -> str:  # a repr in a traceback must not show the password
        return f"RabbitStreamTarget({self.identity!r})"

    @property
    def where(self) -> str:
        return f"{host_text(self.host)}:{self.port}"


def parse_rabbitmq_stream_url(url: str) -> RabbitStreamTarget:
    """The target of a RabbitMQ stream sink URL, untouched; ConfigError (one line, no password) if unusable."""
    text = url.strip()
    refuse = lambda reason: _bad(text, reason)  # noqa: E731
    split = split_server_url(
        text, SCHEME, DEFAULT_PORT, refuse, f"it names no broker ({SCHEME}://HOST:PORT/STREAM)",
        (TLS_SCHEME, DEFAULT_TLS_PORT),
    )  # fmt: skip
    parts, host, port = split.parts, split.host, split.port
    stream = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not stream:
        raise _bad(text, f"it names no stream after the broker ({SCHEME}://HOST:PORT/STREAM)")
    if not _STREAM.fullmatch(stream) or has_control_character(stream) or len(stream.encode()) > 255:
        raise _bad(text, f"stream {stream!r} is not a stream name (up to 255 bytes, no slash or space)")
    given = query_parameters(parts, PARAMETERS, refuse)
    vhost = given.get("vhost", "/")
    if not vhost or has_control_character(vhost):
        raise _bad(text, f"vhost={vhost!r} must name a virtual host (the default is /)")
    create = url_flag("create", given.get("create"), refuse)
    tls = tls_options(given, tls=split.tls, tls_scheme=TLS_SCHEME, bad=refuse)
    key = key_columns(given.get("key"), refuse)
    require(RABBITMQ, f"the RabbitMQ stream sink {shown(text)}")  # now: before anything is created
    user = unquote(parts.username) if parts.username else DEFAULT_USER
    password = (
        unquote(parts.password) if parts.password is not None else (DEFAULT_PASSWORD if not parts.username else "")
    )
    query = "&".join(
        ([f"vhost={quote(vhost, safe='')}"] if vhost != "/" else []) + ([f"key={','.join(key)}"] if key else [])
    )
    scheme = TLS_SCHEME if split.tls else SCHEME
    identity = f"{scheme}://{quote(user, safe='')}@{host_text(host)}:{port}/{quote(stream, safe='')}" + (
        f"?{query}" if query else ""
    )
    return RabbitStreamTarget(identity, host, port, vhost, stream, user, password, create, key, tls)




def shown(url: str) -> str:
    """`url` as it may be printed: the password replaced by ***."""
    return redact_text(url)


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {shown(url)!r} is not usable: {reason}; expected {FORM}")
