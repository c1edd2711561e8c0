"""`rabbitmq-stream://[USER[:PASSWORD]@]HOST[:PORT]/STREAM[?vhost=V][&create=true][&key=COL[,COL...]]`.

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
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import RABBITMQ, require
from icetail.kernel.secrets import redact_text
from icetail.kernel.url_params import has_control_character, parameter_values

SCHEME = "rabbitmq-stream"
FORM = "rabbitmq-stream://[USER[:PASSWORD]@]HOST[:PORT]/STREAM[?vhost=V][&create=true][&key=COL[,COL...]]"
PARAMETERS = ("vhost", "create", "key")
DEFAULT_PORT = 5552
DEFAULT_USER = DEFAULT_PASSWORD = "guest"  # RabbitMQ's default user (localhost only)
_STREAM = re.compile(r"[^\s/]{1,255}")  # a queue name: up to 255 bytes; no slash or space in a URL's path
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


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

    def __repr__(self) -> str:  # a repr in a traceback must not show the password
        return f"RabbitStreamTarget({self.identity!r})"

    @property
    def where(self) -> str:
        return f"{_host(self.host)}:{self.port}"


def parse_rabbitmq_stream_url(url: str) -> RabbitStreamTarget:
    """The target of a RabbitMQ stream sink URL, untouched; ConfigError (one line, no password) if unusable."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:  # a port that is not a number
        raise _bad(text, f"{exc}") from None
    if parts.scheme.lower() != SCHEME:
        raise _bad(text, f"the scheme must be {SCHEME}://")
    if parts.fragment:
        raise _bad(text, "it takes no #fragment")
    host = parts.hostname
    if not host:
        raise _bad(text, f"it names no broker ({SCHEME}://HOST:PORT/STREAM)")
    stream = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not stream:
        raise _bad(text, f"it names no stream after the broker ({SCHEME}://HOST:PORT/STREAM)")
    if not _STREAM.fullmatch(stream) or has_control_character(stream) or len(stream.encode()) > 255:
        raise _bad(text, f"stream {stream!r} is not a stream name (up to 255 bytes, no slash or space)")
    params = parse_qsl(parts.query, keep_blank_values=True)
    try:
        given = parameter_values(params, PARAMETERS)
    except ValueError as problem:
        raise _bad(text, str(problem)) from None
    vhost = given.get("vhost", "/")
    if not vhost or has_control_character(vhost):
        raise _bad(text, f"vhost={vhost!r} must name a virtual host (the default is /)")
    create = _flag(text, "create", given.get("create"))
    key: tuple[str, ...] = ()
    if "key" in given:
        key = tuple(c.strip() for c in given["key"].split(","))
        if not all(key) or any(has_control_character(c) for c in key):
            raise _bad(text, f"key={given['key']!r} must name columns: key=COL or key=COL1,COL2")
    require(RABBITMQ, f"the RabbitMQ stream sink {shown(text)}")  # now: before anything is created
    user = unquote(parts.username) if parts.username else DEFAULT_USER
    password = (
        unquote(parts.password) if parts.password is not None else (DEFAULT_PASSWORD if not parts.username else "")
    )
    query = "&".join(
        ([f"vhost={quote(vhost, safe='')}"] if vhost != "/" else []) + ([f"key={','.join(key)}"] if key else [])
    )
    identity = f"{SCHEME}://{quote(user, safe='')}@{_host(host)}:{port}/{quote(stream, safe='')}" + (
        f"?{query}" if query else ""
    )
    return RabbitStreamTarget(identity, host, port, vhost, stream, user, password, create, key)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 address


def _flag(url: str, name: str, given: str | None) -> bool:
    if given is None:
        return False
    value = given.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _bad(url, f"{name}={given!r} must be true or false")


def shown(url: str) -> str:
    """`url` as it may be printed: the password replaced by ***."""
    return redact_text(url)


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {shown(url)!r} is not usable: {reason}; expected {FORM}")
