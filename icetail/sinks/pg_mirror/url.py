"""`postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=SCHEMA.TABLE[&mode=mirror][&ledger=SCHEMA][&lock_timeout=30s]`.

`lock_timeout` (PostgreSQL's setting, default LOCK_TIMEOUT) bounds how long a statement of the
sink waits for a lock on the target (a long transaction or an `ALTER TABLE` of someone else's):
past it the group fails with a transient SinkError naming the lock, instead of hanging. It is not
part of the sink's identity (changing it does not make another sink).

Every other query parameter is libpq's (sslmode, connect_timeout, ...) and goes to psycopg as
given, so credentials may also come from libpq's environment (PGPASSWORD, PGSERVICE, ~/.pgpass).
A password never leaves this module except inside `conninfo`: the sink's identity (what the
state records and `status` prints) and every message use the URL without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit, urlunsplit

from icetail.kernel.errors import ConfigError
from icetail.kernel.secrets import is_secret_key, redact_text

SCHEMES = ("postgresql", "postgres")
FORM = "postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=SCHEMA.TABLE[&mode=mirror][&ledger=SCHEMA][&lock_timeout=30s]"
MODES = ("mirror", "history")
_OWN = ("table", "mode", "ledger", "lock_timeout")  # parameters of icetail's, not libpq's
LOCK_TIMEOUT = "30s"
_DURATION = re.compile(r"[1-9][0-9]*(ms|s|min|h)?")  # PostgreSQL's units; no unit: milliseconds; 0 (no limit) refused
_MAX_NAME_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL would cut a longer name silently


@dataclass(frozen=True)
class MirrorTarget:
    """Where a mirror writes: the connection, the target table and icetail's ledger table."""

    conninfo: str  # what psycopg connects with; may hold a password: never print it
    identity: str  # the normalized URL without any password: recorded per consumer, printed
    schema: str
    table: str
    mode: str  # mirror | history
    ledger_schema: str  # the schema of icetail_mirror_ledger (the target's unless &ledger=)
    lock_timeout: str = LOCK_TIMEOUT  # PostgreSQL's lock_timeout for the sink's session (&lock_timeout=)

    def __repr__(self) -> str:  # a repr in a traceback must not show the conninfo
        return f"MirrorTarget({self.identity!r})"


def parse_mirror_url(url: str) -> MirrorTarget:
    """The target of a mirror sink URL, without touching it; ConfigError (one line, no password) if unusable."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in SCHEMES:
        raise _bad(text, "the scheme must be postgresql://")
    if parts.fragment:
        raise _bad(text, "it takes no #fragment")
    if not parts.path.strip("/"):
        raise _bad(text, "it names no database after the host")
    params = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: [v for key, v in params if key == k] for k in _OWN}
    for key, values in own.items():
        if len(values) > 1:
            raise _bad(text, f"{key}= is given more than once")
    tables = own["table"]
    if not tables:
        raise _bad(text, "it names no target table (add ?table=SCHEMA.TABLE)")
    schema, dot, table = tables[0].partition(".")
    if not dot or not schema or not table:
        raise _bad(text, f"table={tables[0]!r} must be written as SCHEMA.TABLE")
    for name in (schema, table):
        if len(name.encode()) > _MAX_NAME_BYTES:
            raise _bad(text, f"{name!r} is longer than PostgreSQL's {_MAX_NAME_BYTES}-byte names")
    mode = own["mode"][0] if own["mode"] else "mirror"
    if mode not in MODES:
        raise _bad(text, f"mode={mode!r} is not one of {', '.join(MODES)}")
    ledger = own["ledger"][0] if own["ledger"] else schema
    if not ledger:
        raise _bad(text, "ledger= names no schema")
    lock_timeout = own["lock_timeout"][0] if own["lock_timeout"] else LOCK_TIMEOUT
    if not _DURATION.fullmatch(lock_timeout):
        raise _bad(text, f"lock_timeout={lock_timeout!r} is not a positive duration such as 30s, 500ms or 2min")
    libpq = [(k, v) for k, v in params if k not in _OWN]
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(libpq)))
    identity = _identity(parts, libpq, schema, table, mode, ledger)
    return MirrorTarget(conninfo, identity, schema, table, mode, ledger, lock_timeout)


def _identity(parts: SplitResult, libpq: list[tuple[str, str]], schema: str, table: str, mode: str, ledger: str) -> str:
    """One spelling per target: postgresql://, no password, icetail's parameters first, libpq's sorted."""
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query: list[tuple[str, str]] = [("table", f"{schema}.{table}"), ("mode", mode)]
    if ledger != schema:
        query.append(("ledger", ledger))
    query += sorted((k, v) for k, v in libpq if not is_secret_key(k))  # password=, sslpassword=, ...
    return urlunsplit(("postgresql", netloc, parts.path, urlencode(query, quote_via=quote, safe=""), ""))


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {redact_text(url)!r} is not usable: {reason}; expected {FORM}")
