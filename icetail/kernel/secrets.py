"""Redaction of credentials in FileIO / catalog properties, for every repr and message.

The properties a Spark task needs to read a table (pyiceberg's `s3.secret-access-key`,
`adls.sas-token`, `gcs.oauth2.token`, a REST catalog's vended `s3.session-token`, ...) travel to
the executors inside frozen values. Those values print only the redacted form, so a log line,
a traceback or a task description that shows one never shows a secret.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping

REDACTED = "***"

# Key names that hold a secret (pyiceberg's FileIO and catalog properties, and common spellings).
# `access-key-id` and `client-id` are identifiers rather than secrets, but printing them helps
# nobody: they are redacted too. Spark's own default (spark.redaction.regex) is of the same kind.
_SECRET_WORDS = (
    r"secret|password|passwd|token|credential|private|session|signature|sas|account-key|"
    r"access-key|key-id|client-id|api-key|apikey|auth|connection-string|ticket"
)
_SECRET_KEY = re.compile(rf"(?i)({_SECRET_WORDS})")
# `scheme://user:password@host` in URIs (a catalog's SQLAlchemy or REST URI, a libpq URL)
_URI_PASSWORD = re.compile(r"(://[^/\s:@]*):[^/\s@]*@")
# `name=value` where the name holds a secret: a URL's query parameter (`?password=...&`), a libpq
# keyword/value DSN (`password=...`, `password = 'a b'`), a Spark or pyiceberg property echoed
_NAMED_VALUE = re.compile(
    rf"(?i)(?P<name>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*)(?P<eq>\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;,'\"]+)"
)
# What stands for a password in help text and templates (`USER[:PASSWORD]@HOST`, `password=<password>`,
# `${PGPASSWORD}`), kept as written: redacting it turned the forms icetail prints into nonsense
# (`postgresql://USER[:***@HOST`). Exact words only, so a real password written in capitals is still hidden.
_PLACEHOLDER = re.compile(
    r"(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|\*\*\*|\.\.\.|<[A-Za-z_-]+>|\$\{[A-Za-z_][A-Za-z0-9_]*\})\]?"
)
# Environment variables whose values are secrets wherever they are echoed (libpq's, the AWS chain's).
SECRET_ENV_VARS = ("PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Shorter values are not searched for in text: a password of 3 characters would blank out words.
_MIN_ECHOED_SECRET = 4


def is_secret_key(key: str) -> bool:
    """True for property names whose value must never be printed."""
    return bool(_SECRET_KEY.search(key))


def redact_value(key: str, value: str) -> str:
    """`value` as it may be printed: hidden for a secret key, passwords cut out of URIs."""
    if is_secret_key(key):
        return REDACTED
    return _URI_PASSWORD.sub(_uri_password, value)


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` as it may be printed, logged or stored for display: every password form libpq accepts
    (`user:password@` in a URL, a `password=` query parameter or DSN keyword, any other secret-named
    `name=value`) and the values of the secret environment variables (`PGPASSWORD`, ...) replaced by ***.

    Applied where text leaves icetail (error lines, log records, `status`, recorded sink URLs), so a
    secret that reached a message through a URL or a driver's error text is still never shown.
    """
    text = _URI_PASSWORD.sub(_uri_password, text)
    text = _NAMED_VALUE.sub(_named_value, text)
    env = os.environ if environ is None else environ
    for name in SECRET_ENV_VARS:
        value = env.get(name, "")
        if len(value) >= _MIN_ECHOED_SECRET and value != REDACTED:
            text = text.replace(value, REDACTED)
    return text


def redacted_repr(value: object) -> str:
    """A dataclass's repr with passwords masked (as `redact_text`): configurations holding URLs
    reach logs, tracebacks and debuggers through their repr."""
    shown = (f for f in dataclasses.fields(value) if f.repr)  # type: ignore[arg-type]
    fields = ", ".join(f"{f.name}={getattr(value, f.name)!r}" for f in shown)
    return redact_text(f"{type(value).__name__}({fields})")


def _uri_password(match: re.Match[str]) -> str:
    """`://user:***@`, unless the password is a placeholder of a template."""
    password = match.group(0)[len(match.group(1)) + 1 : -1]
    return match.group(0) if _PLACEHOLDER.fullmatch(password) else f"{match.group(1)}:{REDACTED}@"


def _named_value(match: re.Match[str]) -> str:
    """`name=***`, unless the value is a placeholder of a template."""
    if _PLACEHOLDER.fullmatch(match.group("value")):
        return match.group(0)
    return f"{match.group('name')}{match.group('eq')}{REDACTED}"


def redacted_items(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """(key, printable value) pairs, in the given order."""
    return tuple((key, redact_value(key, value)) for key, value in items)


# The REST catalog client's OAuth2 `credential` (CLIENT_ID:CLIENT_SECRET), which pyiceberg merges
# into every table's FileIO properties; no FileIO reads it.
_CATALOG_CLIENT_SECRETS = frozenset({"credential"})


def fileio_items(properties: Iterable[tuple[str, object]]) -> tuple[tuple[str, str], ...]:
    """The (key, value) pairs a FileIO on an executor is built from, sorted.

    Drops what is not a string (pyiceberg's `auth.manager`: the REST client's live OAuth2
    session) and the catalog client's secret: storage is reached with the storage credentials
    (static or vended), never with the catalog's client secret.
    """
    return tuple(
        sorted(
            (key, value) for key, value in properties if isinstance(value, str) and key not in _CATALOG_CLIENT_SECRETS
        )
    )
