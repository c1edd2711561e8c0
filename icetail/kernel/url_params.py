"""Query parameters of sink and store URLs: unknown ones are refused with the known ones and a did-you-mean.

A typo (`tabel=`) used to reach psycopg as a libpq parameter (`unexpected error: ProgrammingError`,
exit 1) or be ignored; now it is refused where the URL is parsed, exit 2 (issue 33.4).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

# libpq's connection parameters (PostgreSQL 18's list): a postgresql:// URL passes them to psycopg as given
LIBPQ_PARAMETERS = (
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "min_protocol_version",
    "max_protocol_version",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "scram_client_key",
    "scram_server_key",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unknown_parameter(given: Iterable[str], own: Sequence[str], *, libpq: bool = False) -> str | None:
    """Why the first unknown name of `given` is refused (None if all are known): the name, a close known
    one, and the known ones (`own`, then libpq's in short when `libpq`)."""
    known = (*own, *LIBPQ_PARAMETERS) if libpq else tuple(own)
    for name in given:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if not own and not libpq:
            return f"unknown parameter {name!r}{hint}: it takes no query parameters"
        listed = ", ".join(own)
        if libpq:
            listed += (", " if listed else "") + "or a libpq connection parameter (sslmode, connect_timeout, ...)"
        return f"unknown parameter {name!r}{hint}; known: {listed}"
    return None


def parameter_values(params: Sequence[tuple[str, str]], own: Sequence[str], *, libpq: bool = False) -> dict[str, str]:
    """The value of each of `own` that `params` (parse_qsl's pairs) gives; ValueError with the reason if
    a name is unknown (see unknown_parameter) or one of `own` is given more than once."""
    unknown = unknown_parameter((k for k, _ in params), own, libpq=libpq)
    if unknown is not None:
        raise ValueError(unknown)
    values: dict[str, str] = {}
    for name, value in params:
        if name in own:
            if name in values:
                raise ValueError(f"{name}= is given more than once")
            values[name] = value
    return values


def has_control_character(text: str) -> bool:
    """A newline, tab or other control character: refused in names, which messages print on one line."""
    return bool(_CONTROL.search(text))
