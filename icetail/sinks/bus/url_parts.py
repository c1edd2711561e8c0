"""What the bus sinks' URLs (`SCHEME://[USER:PASSWORD@]HOST[:PORT]/...`) share: the server part
checked in one way, the query's parameters, the host shown as a URL writes it, a true/false
parameter, the key columns. Imports no driver."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qsl, urlsplit

from icetail.kernel.errors import ConfigError
from icetail.kernel.url_params import has_control_character, parameter_values

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")

Refusal = Callable[[str], ConfigError]  # the reason -> the sink's one-line ConfigError for its URL


@dataclass(frozen=True)
class ServerUrl:
    parts: SplitResult
    host: str
    port: int
    tls: bool = False  # the URL's scheme is the TLS one


def split_server_url(
    text: str, scheme: str, default_port: int, bad: Refusal, no_host: str, tls: tuple[str, int] | None = None
) -> ServerUrl:
    """`text` split, its scheme, fragment and host checked; `no_host`: the reason when it names none;
    `tls`: the TLS scheme and its default port, if the sink has one."""
    try:
        parts = urlsplit(text)
        is_tls = tls is not None and parts.scheme.lower() == tls[0]
        port = parts.port or (tls[1] if tls is not None and is_tls else default_port)
    except ValueError as exc:  # a port that is not a number
        raise bad(f"{exc}") from None
    if parts.scheme.lower() != scheme and not is_tls:
        raise bad(f"the scheme must be {scheme}://" + (f" or {tls[0]}://" if tls is not None else ""))
    if parts.fragment:
        raise bad("it takes no #fragment")
    if not parts.hostname:
        raise bad(no_host)
    return ServerUrl(parts, parts.hostname, port, is_tls)


def host_text(host: str) -> str:
    """The host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def url_flag(name: str, given: str | None, bad: Refusal) -> bool:
    """A true/false query parameter (absent: false)."""
    if given is None:
        return False
    value = given.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise bad(f"{name}={given!r} must be true or false")


def query_parameters(parts: SplitResult, names: Sequence[str], bad: Refusal) -> dict[str, str]:
    """The URL's query parameters, each of `names` at most once (an unknown one refused with a did-you-mean)."""
    try:
        return parameter_values(parse_qsl(parts.query, keep_blank_values=True), names)
    except ValueError as problem:
        raise bad(str(problem)) from None


def key_columns(given: str | None, bad: Refusal) -> tuple[str, ...]:
    """`key=COL[,COL...]`: the key columns (absent: none)."""
    if given is None:
        return ()
    key = tuple(c.strip() for c in given.split(","))
    if not all(key) or any(has_control_character(c) for c in key):
        raise bad(f"key={given!r} must name columns: key=COL or key=COL1,COL2")
    return key
