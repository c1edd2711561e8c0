"""The SQLite file a `sqlite:///` URL names, checked before SQLite opens it.

SQLite's own errors for a wrong path ("unable to open database file", "file is not a database")
name no path, and a caller that retries connection errors takes them for an outage. The checkpoint
store (state/urls.py) and pyiceberg's SQL catalogs (icetail/catalogs.py) share these checks; both
follow SQLAlchemy's convention (three slashes relative to the working directory, four absolute).
Each raises a one-line ConfigError: `what` names the thing and its URL, `fix` says what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from icetail.kernel.errors import ConfigError

SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every database (an empty file is one too)


def check_folder(path: Path, what: str, fix: str) -> None:
    """The folder of `path` must exist; a relative path whose absolute twin's folder does gets the
    four-slash form (`sqlite:///tmp/x.db` is `./tmp/x.db`)."""
    folder = Path(os.path.abspath(path)).parent
    if folder.is_dir():
        return
    problem = f"{what}: folder {folder} does not exist"
    if path.is_absolute():
        raise ConfigError(f"{problem}; {fix}")
    hint = ""
    if (Path("/") / path).parent.is_dir():
        hint = f"; for /{path.as_posix()} write four slashes: sqlite:////{path.as_posix()}"
    raise ConfigError(f"{problem} (three slashes are relative to the working directory){hint}; or {fix}")


def check_database(path: Path, what: str, fix: str) -> None:
    """`path` must be a SQLite database this process can read: not missing, a folder, unreadable or
    a file of another kind. An empty file passes (SQLite takes it for an empty database)."""
    where = Path(os.path.abspath(path))
    try:
        with open(where, "rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except FileNotFoundError as exc:
        raise ConfigError(f"{what}: {where} does not exist; {fix}") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{what}: {where} is a folder, not a database file; {fix}") from exc
    except PermissionError as exc:
        raise ConfigError(
            f"{what}: permission denied reading {where}; give uid {os.getuid()} read access to it "
            f"and its folder {where.parent}, or {fix}"
        ) from exc
    if header and header != SQLITE_HEADER:
        raise ConfigError(f"{what}: {where} is not a SQLite database; {fix}")


def unwritable_folder(path: Path) -> Path | None:
    """The folder of `path` if this process cannot write there: SQLite then fails to open a database
    that needs its journal or WAL index created beside it ("unable to open database file")."""
    folder = Path(os.path.abspath(path)).parent
    return None if os.access(folder, os.W_OK) else folder
