"""Which PostgreSQL errors are setup errors (terminal), shared by the mirror sink and the checkpoint store.

A database, role or schema that does not exist, a failed authentication and a missing privilege
are permanent until someone changes the setup; they used to surface as transient (exit 1, `serve`
retrying cycle after cycle). A refused connection carries no SQLSTATE (libpq reports it as text),
so its message is matched too. Works on any exception: psycopg is never imported here.
"""

from __future__ import annotations

import re

# invalid_catalog_name (no such database), invalid_authorization_specification (no such role, no
# pg_hba.conf entry), invalid_password, invalid_schema_name, insufficient_privilege
SETUP_SQLSTATES = frozenset({"3D000", "28000", "28P01", "3F000", "42501"})
_SETUP_TEXT = re.compile(
    r'database "[^"]*" does not exist|role "[^"]*" does not exist|schema "[^"]*" does not exist|'
    r"authentication failed|no pg_hba\.conf entry|no password supplied|permission denied",
    re.IGNORECASE,
)
SETUP_FIX = "fix the URL's user, password or database, or the grants; retrying cannot help"


def is_setup_problem(exc: BaseException) -> bool:
    """True for an error only a change of the setup cures (see the module docstring)."""
    return getattr(exc, "sqlstate", None) in SETUP_SQLSTATES or bool(_SETUP_TEXT.search(str(exc)))
