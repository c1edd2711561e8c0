"""`postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=SCHEMA.TABLE[&mode=mirror][&ledger=SCHEMA][&lock_timeout=30s]`.

`lock_timeout` (PostgreSQL's setting, default LOCK_TIMEOUT) bounds how long a statement of the
sink waits for a lock on the target (a long transaction or an `ALTER TABLE` of someone else's):
past it the group fails with a transient SinkError naming the lock, instead of hanging. It is not
part of the sink's identity (changing it does not make another sink).

Every other query parameter must be one of libpq's (sslmode, connect_timeout, ...; an unknown one
is refused with a did-you-mean) and goes to psycopg as given, so credentials may also come from
libpq's environment (PGPASSWORD, PGSERVICE, ~/.pgpass). The driver (the `postgres` extra) is
checked when the URL is parsed, before anything is created.
A password never leaves this module except inside `conninfo`: the sink's identity (what the
state records and `status` prints) and every message use the URL without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit, urlunsplit

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import POSTGRES, require
from icetail.kernel.secrets import is_secret_key, redact_text
from icetail.kernel.url_params import has_control_character, parameter_values

SCHEMES = ("postgresql", "postgres")
FORM = "postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=SCHEMA.TABLE[&mode=mirror][&ledger=SCHEMA][&lock_timeout=30s]"
MODES = ("mirror", "history")
PARAMETERS = ("table", "mode", "ledger", "lock_timeout")  # icetail's own; libpq's are known too
_OWN = PARAMETERS
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
    try:
        own = parameter_values(params, _OWN, libpq=True)
    except ValueError as problem:
        raise _bad(text, str(problem)) from None
    if "table" not in own:
        raise _bad(text, "it names no target table (add ?table=SCHEMA.TABLE)")
    schema, table = _schema_and_table(text, own["table"], parts.path.strip("/"))
    for name in (schema, table):
        if has_control_character(name):
            raise _bad(text, f"{name!r} holds a control character (a newline, a tab, ...)")
        if len(name.encode()) > _MAX_NAME_BYTES:
            raise _bad(text, f"{name!r} is longer than PostgreSQL's {_MAX_NAME_BYTES}-byte names")
    mode = own.get("mode", "mirror")
    if mode not in MODES:
        raise _bad(text, f"mode={mode!r} is not one of {', '.join(MODES)}")
    ledger = own.get("ledger", schema)
    if not ledger:
        raise _bad(text, "ledger= names no schema")
    lock_timeout = own.get("lock_timeout", LOCK_TIMEOUT)
    if not _DURATION.fullmatch(lock_timeout):
        raise _bad(text, f"lock_timeout={lock_timeout!r} is not a positive duration such as 30s, 500ms or 2min")
    if has_control_character(ledger):
        raise _bad(text, f"ledger={ledger!r} holds a control character (a newline, a tab, ...)")
    require(POSTGRES, f"the PostgreSQL sink {redact_text(text)}")  # now: before anything is created
    libpq = [(k, v) for k, v in params if k not in _OWN]
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(libpq)))
    identity = _identity(parts, libpq, schema, table, mode, ledger)
    return MirrorTarget(conninfo, identity, schema, table, mode, ledger, lock_timeout)


def _schema_and_table(url: str, name: str, database: str) -> tuple[str, str]:
    """SCHEMA.TABLE of `table=`; three parts (DB.SCHEMA.TABLE) are refused, not made schema `a`, table `b.c`."""
    parts = name.split(".")
    if len(parts) == 3 and all(parts):
        raise _bad(
            url,
            f"table={name!r} has three parts; write table=SCHEMA.TABLE (the database is the URL's path, "
            f"/{database}: for database {parts[0]!r} write .../{parts[0]}?table={parts[1]}.{parts[2]})",
        )
    if len(parts) != 2 or not all(parts):
        raise _bad(url, f"table={name!r} must be written as SCHEMA.TABLE")
    return parts[0], parts[1]


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
