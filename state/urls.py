"""Parse a checkpoint store URL into where the store lives.

SQLite paths follow SQLAlchemy's convention, as pyiceberg's SQL catalog URIs do:
`sqlite:///relative/state.db` (three slashes) and `sqlite:////absolute/state.db` (four).
PostgreSQL URLs are libpq URLs plus an optional `schema=` query parameter naming the schema
that holds the `icetail_*` tables (created if missing); passwords never appear in messages. Any
other parameter must be one of libpq's (a typo is refused with a did-you-mean), and psycopg (the
`postgres` extra) must be installed: both are checked here, before anything is created.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from icetail.kernel.errors import ConfigError
from icetail.kernel.extras import POSTGRES, require
from icetail.kernel.secrets import redact_text
from icetail.kernel.sqlite_files import check_folder
from icetail.kernel.url_params import unknown_parameter

ACCEPTED_FORMS = (
    "sqlite:///relative/path/state.db",
    "sqlite:////absolute/path/state.db",
    "postgresql://user@host:5432/dbname[?schema=name]",
)
POSTGRES_PARAMETERS = ("schema",)  # icetail's own; libpq's are known too
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class SqliteLocation:
    path: Path
    display: str  # the URL as given, for messages


@dataclass(frozen=True)
class PostgresLocation:
    conninfo: str  # libpq URL without the `schema` parameter; may hold a password
    schema: str | None  # None: the connection's default search_path
    display: str  # the URL with any password replaced by ***


StoreLocation = SqliteLocation | PostgresLocation


def parse_store_url(url: str) -> StoreLocation:
    """Where a store lives; ConfigError (one line, naming the URL and the accepted forms) if unusable."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return _sqlite(url, parts.netloc, parts.path, parts.query, parts.fragment)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url)
    raise _bad(url, "unknown scheme")


def check_sqlite_folder(location: SqliteLocation) -> None:
    """The folder of a SQLite store must exist: it is never created, so a path with a typo, or three
    slashes meant as an absolute path (`sqlite:///tmp/x.db` is `./tmp/x.db`), is refused in one line."""
    folder = Path(os.path.abspath(location.path)).parent
    check_folder(location.path, f"checkpoint store {location.display}", f"create the folder first: mkdir -p {folder}")


def new_sqlite_file(url: str) -> str | None:
    """The path of the SQLite file `url` names if it does not exist yet (opening the store creates it), else None."""
    location = parse_store_url(url)
    if isinstance(location, SqliteLocation) and not location.path.exists():
        return os.path.abspath(location.path)
    return None


def remove_sqlite_file(path: str) -> None:
    """Remove a SQLite database file and the journal files SQLite keeps beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


def store_place(url: str) -> str:
    """Where a store is, for the line `run` and `serve` print: a SQLite file's absolute path, else the URL
    without its password."""
    location = parse_store_url(url)
    if isinstance(location, SqliteLocation):
        return os.path.abspath(location.path)
    return location.display


def redact(url: str) -> str:
    """The URL with every password form (userinfo, `password=` parameter, PGPASSWORD's value) as ***."""
    return redact_text(url)


def _sqlite(url: str, netloc: str, path: str, query: str, fragment: str) -> SqliteLocation:
    if netloc:
        raise _bad(url, f"a sqlite URL has no host (got {netloc!r}); use three slashes before a relative path")
    if query:
        names = [k for k, _ in parse_qsl(query, keep_blank_values=True)]
        raise _bad(url, f"a sqlite URL takes no query parameters: {unknown_parameter(names, ()) or query}")
    if fragment:
        raise _bad(url, "a sqlite URL takes no #fragment")
    file_path = unquote(path[1:]) if path.startswith("/") else ""
    if not file_path or file_path.endswith("/") or file_path == ":memory:":
        raise _bad(url, "it names no database file")
    if "://" in file_path:
        raise _bad(url, "the path holds another URL; a sqlite store is a local file")
    if file_path.startswith("~"):
        raise _bad(url, "~ is not expanded; write the absolute path after four slashes")
    return SqliteLocation(path=Path(file_path), display=url)


def _postgres(url: str) -> PostgresLocation:
    parts = urlsplit(url.strip())
    display = redact(url.strip())
    params = parse_qsl(parts.query, keep_blank_values=True)
    unknown = unknown_parameter((k for k, _ in params), POSTGRES_PARAMETERS, libpq=True)
    if unknown is not None:
        raise _bad(display, unknown)
    schemas = [v for k, v in params if k == "schema"]
    if len(schemas) > 1:
        raise _bad(display, "schema= is given more than once")
    schema = schemas[0] if schemas else None
    if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
        raise _bad(display, f"schema {schema!r} must be a lower-case SQL identifier")
    require(POSTGRES, f"checkpoint store {display}")
    rest = urlencode([(k, v) for k, v in params if k != "schema"])
    conninfo = urlunsplit(parts._replace(query=rest))
    return PostgresLocation(conninfo=conninfo, schema=schema, display=display)


def _bad(url: str, why: str) -> ConfigError:
    forms = ", ".join(ACCEPTED_FORMS)
    return ConfigError(f"bad checkpoint store URL {redact(url)!r} ({why}); expected one of: {forms}")
