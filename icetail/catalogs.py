"""Open a pyiceberg catalog by name, with one-line errors: the one way the source and the sinks do it.

It sits beside the kernel rather than in `monitor/engine` because the Iceberg sink opens its
catalog too, and sinks may not import the monitor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NotInstalledError
from pyiceberg.utils.config import Config

from icetail.kernel.errors import (
    CatalogNotFoundError,
    CatalogUnavailableError,
    ConfigError,
    IcetailError,
    error_text,
    message_line,
)
from icetail.kernel.extras import GLUE, HIVE, require
from icetail.kernel.sqlite_files import check_database, check_folder, unwritable_folder


def open_catalog(name: str, overrides: Mapping[str, str] | None = None) -> Catalog:
    """The catalog `name` as configured in .pyiceberg.yaml or PYICEBERG_CATALOG__NAME__* variables.

    `overrides` (properties given some other way, e.g. as Spark data source options) win.
    """
    database: Path | None = None
    try:
        # read .pyiceberg.yaml and PYICEBERG_CATALOG__* now: pyiceberg's own copy is taken at import
        properties = {**cast(dict[str, str], Config().get_catalog_config(name) or {}), **(overrides or {})}
        _require_support(name, properties)
        database = _sqlite_database(properties)
        if database is not None:
            _check_sqlite(name, properties["uri"], database)
        return load_catalog(name, **properties)
    except (ValueError, KeyError) as exc:
        raise CatalogNotFoundError(
            f"catalog {name!r} is not configured ({_pyiceberg_reason(exc)}); {_setup(name, exc)}"
        ) from exc
    except NotInstalledError as exc:
        kind = properties.get("type", "")
        extra = f"icetail[{kind}]" if kind in ("glue", "hive") else "the pyiceberg extra it names"
        raise CatalogNotFoundError(
            f"catalog {name!r} needs support that is not installed ({exc}); pip install '{extra}'"
        ) from exc
    except IcetailError:
        raise  # _require_support's refusal, as it is
    except Exception as exc:  # noqa: BLE001 - drivers raise their own types (sqlalchemy, requests)
        setup = _AWS_SETUP_ERRORS.get(type(exc).__name__)
        if setup is not None:  # botocore's: a retry cannot heal a missing region or credentials
            raise ConfigError(f"catalog {name!r} cannot start: {setup} ({error_text(exc)})") from exc
        unwritable = None if database is None else _unwritable(name, properties["uri"], database, exc)
        if unwritable is not None:
            raise unwritable from exc
        raise CatalogUnavailableError(f"catalog {name!r} is unreachable: {error_text(exc)}") from exc


def _sqlite_database(properties: Mapping[str, str]) -> Path | None:
    """The database file of a SQL catalog on SQLite (None for any other catalog, an in-memory one, or
    a `file:` URI, which SQLite reads with options of its own)."""
    uri = properties.get("uri")
    kind = str(properties.get("type", "sql")).lower()
    if kind != "sql" or not isinstance(uri, str) or not uri.lower().startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url  # pyiceberg's SQL catalog is built on it
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(uri).database
    except ArgumentError:
        return None  # pyiceberg says what is wrong with the URL
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _check_sqlite(name: str, uri: str, database: Path) -> None:
    """A typo in the path is a ConfigError naming it, before SQLite opens anything: a missing folder
    or file, a file the user cannot read, one that is not a database. A missing file is not created
    (pyiceberg would make an empty catalog there): the table icetail is asked for cannot be in it."""
    what, fix = f"catalog {name!r} ({uri})", _uri_fix(name)
    check_folder(database, what, fix)
    check_database(database, what, fix)


def _unwritable(name: str, uri: str, database: Path, exc: Exception) -> ConfigError | None:
    """The error to raise if `exc` (opening `database`) failed because SQLite cannot write in its folder."""
    text = str(exc)
    folder = unwritable_folder(database)
    if folder is None or not ("unable to open database file" in text or "readonly database" in text):
        return None
    return ConfigError(
        f"catalog {name!r} ({uri}): SQLite cannot open {os.path.abspath(database)} because folder {folder} is not "
        f"writable (its journal or WAL index goes there: {error_text(exc)}); give uid {os.getuid()} write access "
        f"to it, or {_uri_fix(name)}"
    )


def _uri_fix(name: str) -> str:
    return f"check the catalog's uri ({_variable(name)}__URI or .pyiceberg.yaml)"


def _variable(name: str) -> str:
    return f"PYICEBERG_CATALOG__{name.upper().replace('-', '_')}"


def _require_support(name: str, properties: Mapping[str, str]) -> None:
    """A Glue or Hive catalog needs its extra: said as a ConfigError (exit 2) before pyiceberg tries it."""
    kind = str(properties.get("type", "")).lower()
    if not kind and str(properties.get("uri", "")).startswith("thrift://"):
        kind = "hive"  # pyiceberg infers a Hive catalog from a thrift:// URI
    extra = {"glue": GLUE, "hive": HIVE}.get(kind)
    if extra is not None:
        require(extra, f"catalog {name!r} (type {kind})")


# botocore exception names (matched by name: botocore is only there with the glue extra) -> the fix
_AWS_SETUP_ERRORS = {
    "NoRegionError": "no AWS region is configured; set AWS_REGION or the catalog's glue.region property",
    "NoCredentialsError": "no AWS credentials were found; configure the AWS credential chain or glue.* properties",
    "PartialCredentialsError": "the AWS credentials are incomplete; check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
}


def _setup(name: str, exc: BaseException) -> str:
    """How to configure catalog `name`. pyiceberg takes the type from the URI's scheme, so only a
    URI of another scheme (or a catalog without one, Glue's) needs the `__TYPE` variable."""
    variable = _variable(name)
    if "infer the catalog type" in str(exc):
        return f"set {variable}__TYPE (sql, rest, hive, glue, ...) or give a URI whose scheme names it"
    return (
        f"set {variable}__URI (its scheme gives the type: sqlite:////abs/catalog.db or postgresql://... "
        f"a SQL catalog, https://... REST, thrift://... Hive; Glue takes {variable}__TYPE=glue instead), "
        "or define it in .pyiceberg.yaml (in PYICEBERG_HOME or the home directory)"
    )


def _pyiceberg_reason(exc: BaseException) -> str:
    """pyiceberg's reason without its advice about a `--uri` flag, which is pyiceberg's CLI, not ours."""
    return message_line(exc).split(", please provide")[0]
