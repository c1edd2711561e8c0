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
