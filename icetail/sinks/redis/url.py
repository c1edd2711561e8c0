"""`redis-stream://[[USER]:PASSWORD@]HOST[:PORT]/KEY[?db=N][&create=true][&key=COL,...][&maxlen=N][&max_message_bytes=N]`,
or `rediss-stream://...` over TLS (as redis-py's `rediss://`) with `ca=PATH`, `cert=PATH&cert_key=PATH` (bus/tls.py).

Parsed with the standard library only, without side effects and without importing redis-py
(whose presence is checked here, kernel/extras.py). `KEY` (URL-decoded, one path segment) is
the stream every change goes to; it must exist unless `create=true`. `maxlen` trims the stream
to about that many entries as it grows (XADD MAXLEN ~). A password never leaves this module
except inside `password`: the sink's identity, what the state records and `status` prints, is
the URL without it and without `create` (creating is not part of where the changes go).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import REDIS, require
from icetail.kernel.secrets import redact_text
from icetail.kernel.url_params import has_control_character
from icetail.sinks.bus.tls import PARAMETERS as TLS_PARAMETERS
from icetail.sinks.bus.tls import Tls, tls_options
from icetail.sinks.bus.url_parts import host_text, key_columns, query_parameters, split_server_url, url_flag

SCHEME = "redis-stream"
TLS_SCHEME = "rediss-stream"  # as redis-py's rediss://
SCHEMES = (SCHEME, TLS_SCHEME)
FORM = (
    "redis-stream://[[USER]:PASSWORD@]HOST[:PORT]/KEY"
    "[?db=N][&create=true][&key=COL[,COL...]][&maxlen=N][&max_message_bytes=N] "
    "(rediss-stream://... for TLS, with ca=PATH[&cert=PATH&cert_key=PATH])"
)
PARAMETERS = ("db", "create", "key", "maxlen", "max_message_bytes", *TLS_PARAMETERS)
DEFAULT_PORT = 6379
MIN_MAXLEN = 1000  # trimming keeps at least this many entries: a reader far behind still finds its place


@dataclass(frozen=True)
class RedisTarget:
    """Where the sink appends: the server, the database and the stream key."""

    identity: str  # the normalized URL without any password: recorded per consumer, printed
    host: str
    port: int
    stream: str  # the stream's key
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never print it
    create: bool = False  # create the stream when it is missing
    key: tuple[str, ...] = ()  # key columns: each entry's `key` field
    maxlen: int | None = None  # XADD MAXLEN ~ this
    max_message_bytes: int | None = None  # a lower limit than the server's for one entry's envelope
    tls: Tls | None = None  # rediss-stream://: the connection's TLS files

    def __repr__(self) -> str:  # a repr in a traceback must not show the password
        return f"RedisTarget({self.identity!r})"

    @property
    def where(self) -> str:
        return f"{host_text(self.host)}:{self.port}"


def parse_redis_url(url: str) -> RedisTarget:
    """The target of a Redis stream sink URL, without touching it; ConfigError (one line, no password) if unusable."""
    text = url.strip()
    refuse = lambda reason: _bad(text, reason)  # noqa: E731
    no_host = "it names no server (redis-stream://HOST:PORT/KEY)"
    split = split_server_url(text, SCHEME, DEFAULT_PORT, refuse, no_host, (TLS_SCHEME, DEFAULT_PORT))
    parts, host, port = split.parts, split.host, split.port
    stream = unquote(parts.path.removeprefix("/"))
    if not stream:
        raise _bad(text, "it names no stream key after the server (redis-stream://HOST:PORT/KEY)")
    if "/" in parts.path.removeprefix("/") or has_control_character(stream) or stream != stream.strip():
        raise _bad(text, f"stream key {stream!r} must be one path segment without spaces at its ends (%2F for a /)")
    given = query_parameters(parts, PARAMETERS, refuse)
    db = _count(text, "db", given.get("db"), minimum=0) or 0
    maxlen = _count(text, "maxlen", given.get("maxlen"), minimum=MIN_MAXLEN)
    max_bytes = _count(text, "max_message_bytes", given.get("max_message_bytes"), minimum=1)
    create = url_flag("create", given.get("create"), refuse)
    tls = tls_options(given, tls=split.tls, tls_scheme=TLS_SCHEME, bad=refuse)
    key = key_columns(given.get("key"), refuse)
    require(REDIS, f"the Redis stream sink {shown(text)}")  # now: before anything is created
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    query = [f"db={db}"] if db else []
    query += [f"key={','.join(key)}"] if key else []
    query += [f"maxlen={maxlen}"] if maxlen is not None else []
    query += [f"max_message_bytes={max_bytes}"] if max_bytes is not None else []
    user = f"{quote(username, safe='')}@" if username else ""
    path = quote(stream, safe=":{}-_.~")
    scheme = TLS_SCHEME if split.tls else SCHEME
    identity = f"{scheme}://{user}{host_text(host)}:{port}/{path}" + ("?" + "&".join(query) if query else "")
    return RedisTarget(identity, host, port, stream, db, username, password, create, key, maxlen, max_bytes, tls)



def _count(url: str, name: str, given: str | None, *, minimum: int) -> int | None:
    if given is None:
        return None
    if not given.isdigit() or int(given) < minimum:
        raise _bad(url, f"{name}={given!r} must be a whole number of at least {minimum}")
    return int(given)



def shown(url: str) -> str:
    """`url` as it may be printed: a password (`USER:PASSWORD@`, `:PASSWORD@`) replaced by ***."""
    return redact_text(url)


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {shown(url)!r} is not usable: {reason}; expected {FORM}")
