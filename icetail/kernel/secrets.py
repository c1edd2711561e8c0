"""Redaction of credentials in FileIO / catalog properties, for every repr and message.

The properties a Spark task needs to read a table (pyiceberg's `s3.secret-access-key`,
`adls.sas-token`, `gcs.oauth2.token`, a REST catalog's vended `s3.session-token`, ...) travel to
the executors inside frozen values. Those values print only the redacted form, so a log line,
a traceback or a task description that shows one never shows a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"

# Key names that hold a secret (pyiceberg's FileIO and catalog properties, and common spellings).
# `access-key-id` and `client-id` are identifiers rather than secrets, but printing them helps
# nobody: they are redacted too. Spark's own default (spark.redaction.regex) is of the same kind.
_SECRET_KEY = re.compile(
    r"(?i)(secret|password|passwd|token|credential|private|session|signature|sas|account-key|"
    r"access-key|key-id|client-id|api-key|apikey|auth|connection-string|ticket)"
)
# `scheme://user:password@host` in URIs (a catalog's SQLAlchemy or REST URI)
_URI_PASSWORD = re.compile(r"(://[^/\s:@]*):[^/\s@]*@")


def is_secret_key(key: str) -> bool:
    """True for property names whose value must never be printed."""
    return bool(_SECRET_KEY.search(key))


def redact_value(key: str, value: str) -> str:
    """`value` as it may be printed: hidden for a secret key, passwords cut out of URIs."""
    if is_secret_key(key):
        return REDACTED
    return _URI_PASSWORD.sub(rf"\1:{REDACTED}@", value)


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
