"""`nats://[USER[:PASSWORD]@]HOST[:PORT]/SUBJECT_PREFIX?stream=NAME[&create=true][&key=COL[,COL...]]`,
or `tls://...` (nats-py's own scheme for TLS) with `&ca=PATH`, `&cert=PATH&cert_key=PATH` (bus/tls.py).

Parsed with the standard library only, without side effects and without importing nats-py (whose
presence is checked here, kernel/extras.py). Each change goes to subject
`SUBJECT_PREFIX.<namespace>.<table>`, and with `key=` to `...<table>.<key>` (sink.py says how names
and key values become subject tokens). `stream` names the JetStream stream that must take those
subjects; it is created only with `create=true` (a stream made elsewhere is never changed). A
password (or a token, `nats://TOKEN@HOST`) never leaves this module except inside `server`: the
sink's identity, what the state records and `status` prints, is the URL without it and without
`create` (creating is not part of where the changes go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import NATS, require
from icetail.kernel.secrets import redact_text
from icetail.sinks.bus.tls import PARAMETERS as TLS_PARAMETERS
from icetail.sinks.bus.tls import Tls, tls_options
from icetail.sinks.bus.url_parts import host_text, key_columns, query_parameters, split_server_url, url_flag

SCHEME = "nats"
TLS_SCHEME = "tls"  # nats-py's: the same port, TLS required
SCHEMES = (SCHEME, TLS_SCHEME)
FORM = (
    "nats://[USER[:PASSWORD]@]HOST[:PORT]/SUBJECT_PREFIX?stream=NAME[&create=true][&key=COL[,COL...]] "
    "(tls://... for TLS, with &ca=PATH[&cert=PATH&cert_key=PATH])"
)
PARAMETERS = ("stream", "create", "key", *TLS_PARAMETERS)
DEFAULT_PORT = 4222
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")  # a subject token icetail writes: no wildcard, no space, no dot
_STREAM = re.compile(r"[A-Za-z0-9_-]{1,255}")  # JetStream's names: no ., *, >, spaces or path separators


@dataclass(frozen=True)
class NatsTarget:
    """Where the sink publishes: the server, the subject prefix and the stream that stores them."""

    server: str  # nats|tls://[USER[:PASSWORD]@]HOST:PORT as nats-py connects; may hold a password: never print it
    identity: str  # the normalized URL without any password: recorded per consumer, printed
    host: str
    port: int
    subject_prefix: str  # dot-separated tokens, e.g. `icetail` or `cdc.prod`
    stream: str
    create: bool = False  # create the stream when it is missing
    key: tuple[str, ...] = ()  # key columns: the `Icetail-Key` header and the subject's last token
    tls: Tls | None = None  # tls://: the connection's TLS files

    def __repr__(self) -> str:  # a repr in a traceback must not show the server's password
        return f"NatsTarget({self.identity!r})"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def parse_nats_url(url: str) -> NatsTarget:
    """The target of a NATS sink URL, without touching it; ConfigError (one line, no password) if unusable."""
    text = url.strip()
    refuse = lambda reason: _bad(text, reason)  # noqa: E731
    split = split_server_url(
        text, SCHEME, DEFAULT_PORT, refuse, "it names no server (nats://HOST:PORT/...)", (TLS_SCHEME, DEFAULT_PORT)
    )
    parts, host, port = split.parts, split.host, split.port
    prefix = unquote(parts.path.strip("/"))
    if not prefix:
        raise _bad(text, "it names no subject prefix after the server (nats://HOST:PORT/SUBJECT_PREFIX?stream=NAME)")
    bad_tokens = [t for t in prefix.split(".") if not _TOKEN.fullmatch(t)]
    if bad_tokens:
        raise _bad(
            text,
            f"subject prefix {prefix!r} must be dot-separated tokens of letters, digits, _ and - "
            "(no wildcard, space or empty token)",
        )
    given = query_parameters(parts, PARAMETERS, refuse)
    if "stream" not in given:
        raise _bad(text, "it names no stream (add ?stream=NAME: the JetStream stream that stores the subjects)")
    stream = given["stream"]
    if not _STREAM.fullmatch(stream):
        raise _bad(text, f"stream={stream!r} is not a JetStream stream name (letters, digits, _ and -)")
    create = url_flag("create", given.get("create"), refuse)
    tls = tls_options(given, tls=split.tls, tls_scheme=TLS_SCHEME, bad=refuse)
    key = key_columns(given.get("key"), refuse)
    require(NATS, f"the NATS sink {shown(text)}")  # now: before anything is created
    netloc = parts.netloc.rsplit("@", 1)
    userinfo = netloc[0] if len(netloc) == 2 else ""
    user = userinfo.split(":", 1)[0]
    scheme = TLS_SCHEME if split.tls else SCHEME
    server = f"{scheme}://{userinfo + '@' if userinfo else ''}{host_text(host)}:{port}"
    query = f"?stream={stream}" + (f"&key={','.join(key)}" if key else "")
    # a user name alone may be a token (nats://TOKEN@HOST): the identity shows no userinfo at all then
    shown_user = f"{user}@" if user and ":" in userinfo else ""
    identity = f"{scheme}://{shown_user}{host_text(host)}:{port}/{prefix}{query}"
    return NatsTarget(server, identity, host, port, prefix, stream, create, key, tls)




def shown(url: str) -> str:
    """`url` as it may be printed: a password, and a token (`nats://TOKEN@HOST`, which redact_text
    cannot tell from a user name), replaced by ***."""
    text = redact_text(url)
    return re.sub(r"^(\s*(?:nats|tls)://)([^/@:\s]+)@", r"\1***@", text, flags=re.IGNORECASE)


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {shown(url)!r} is not usable: {reason}; expected {FORM}")
