"""What a consumer id may be, and paths built from user input that provably stay in their folder.

A consumer id becomes part of file and object names (a parquet sink's `_tmp/<consumer>/`, every
chunk's name), so it is checked once, where it enters (the pipeline's configuration, `open_sink`),
instead of being cleaned: a cleaning maps two ids onto one name (`a b` and `a_b`) and kept `..`,
which made `_tmp/..` the sink folder itself. Names beginning with `_` or `.` are refused too:
readers (pyarrow datasets, Spark) skip such files, so a chunk would be delivered and never seen.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from icetail.kernel.errors import ConfigError

CONSUMER_ID_MAX_LENGTH = 128
CONSUMER_ID_FORM = f"1 to {CONSUMER_ID_MAX_LENGTH} letters, digits, '.', '_' or '-', beginning with a letter or digit"
_CONSUMER_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{CONSUMER_ID_MAX_LENGTH - 1}}}")


def is_consumer_id(text: str) -> bool:
    return _CONSUMER_ID.fullmatch(text) is not None


def check_consumer_id(consumer: str, *, derived_from: str | None = None) -> str:
    """`consumer` if it is a valid consumer id; ConfigError (one line: the id, the form, the fix) if not.

    `derived_from` names where a default id came from (`--catalog and --table`), for the fix.
    """
    if is_consumer_id(consumer):
        return consumer
    if derived_from is not None:
        raise ConfigError(
            f"the default consumer id {consumer!r} (from {derived_from}) is not a valid consumer id "
            f"({CONSUMER_ID_FORM}); name one with --consumer"
        )
    raise ConfigError(f"consumer id {consumer!r} is not valid: a consumer id is {CONSUMER_ID_FORM}")


def path_inside(folder: str | os.PathLike[str], name: str) -> Path:
    """`folder/name`, refused (ConfigError) unless it is a direct entry of `folder`.

    The check is on the normalized path, with no filesystem access: `name` must be one plain path
    component (no separator, not `.` or `..`), which is what makes "stays inside" hold by
    construction rather than by what the disk holds at the moment of the check.
    """
    if not _is_plain_name(name) or os.sep in name:
        raise ConfigError(f"{name!r} is not a plain file name; it would leave folder {os.fspath(folder)!r}")
    base = Path(os.path.normpath(os.path.abspath(folder)))
    joined = Path(os.path.normpath(base / name))
    if joined.parent != base:
        raise ConfigError(f"{name!r} would leave folder {os.fspath(folder)!r}")
    return joined


def key_inside(prefix: str, name: str) -> str:
    """`prefix/name` for an object store key, with the same rule as `path_inside` for `name`."""
    if not _is_plain_name(name):
        raise ConfigError(f"{name!r} is not a plain object name; it would leave prefix {prefix!r}")
    return f"{prefix.rstrip('/')}/{name}"


def _is_plain_name(name: str) -> bool:
    """One path component: not empty, not `.` or `..`, no `/` and no NUL."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name
