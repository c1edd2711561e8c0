"""Open a sink from its URL.

Accepted forms (see docs/sinks.md):

* `parquet://PATH`              - a directory of Parquet files, one per chunk; exactly once
* `iceberg://CATALOG/NS.TABLE`  - appends to an Iceberg table of a pyiceberg catalog; exactly once
* `jsonl://PATH`                - appends JSON lines to a file; at least once
* `-` or `stdout:`              - JSON lines to standard output; at least once

PATH is everything after `scheme://`, taken literally: a leading `/` makes it absolute
(`parquet:///data/changes` is `/data/changes`), anything else is relative to the working
directory (`parquet://out/changes` is `./out/changes`). The file sinks write to the local
filesystem only: a PATH that is itself a URL (`parquet://s3://bucket/x`) or starts with `~`
(not expanded) is refused rather than written to a local folder of that name.

`normalize_sink_url` gives the form a consumer's sink is recorded and compared in.
"""

from __future__ import annotations

import os
import re

import pyarrow as pa

from icetail.reader.sinks.base import Sink
from icetail.reader.sinks.iceberg_sink import IcebergTableSink
from icetail.reader.sinks.jsonl_sink import JsonlFileSink, StdoutSink
from icetail.reader.sinks.parquet_sink import ParquetDirSink
from icetail.state.errors import ConfigError

ACCEPTED_FORMS = (
    "parquet:///abs/dir",
    "parquet://rel/dir",
    "iceberg://CATALOG/NS.TABLE",
    "jsonl:///abs/file.jsonl",
    "jsonl://rel/file.jsonl",
    "-",
    "stdout:",
)
_URL_AT_START = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")
_URL_INSIDE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def remote_scheme(path: str) -> str | None:
    """The scheme if `path` holds a URL (`s3://b/x`, `/s3://b/x` -> `s3`) rather than a local path."""
    match = _URL_AT_START.match(path) or _URL_INSIDE.search(path)
    return match.group(1) if match else None


def normalize_sink_url(url: str) -> str:
    """One spelling per sink: file paths absolute (relative ones against the working directory),
    stdout as `stdout:`, the scheme lower case. Two URLs naming the same sink normalize equal.
    ConfigError for a URL `open_sink` would refuse."""
    scheme, rest = _split(url)
    if scheme == "stdout":
        return "stdout:"
    if scheme in ("parquet", "jsonl"):
        return f"{scheme}://{os.path.normpath(os.path.abspath(_path(url, rest)))}"
    catalog, identifier = _iceberg_target(url, rest)
    return f"iceberg://{catalog}/{identifier}"


def open_sink(url: str, *, consumer: str, schema: pa.Schema | None = None) -> Sink:
    """The sink `url` names, opened for `consumer`.

    `schema` (the change rows' schema, optional) lets the iceberg sink create its table at
    open rather than at the first write; the other sinks ignore it. A URL that cannot be
    used raises ConfigError naming it and the accepted forms.
    """
    if not consumer:
        raise ConfigError("open_sink needs a non-empty consumer id")
    scheme, rest = _split(url)
    if scheme == "stdout":
        return StdoutSink()
    if scheme == "parquet":
        return ParquetDirSink(_path(url, rest), consumer=consumer)
    if scheme == "jsonl":
        return JsonlFileSink(_path(url, rest), consumer=consumer)
    catalog, identifier = _iceberg_target(url, rest)
    return IcebergTableSink(catalog, identifier, consumer=consumer, schema=schema)


def _split(url: str) -> tuple[str, str]:
    """(scheme, rest) of a URL of a known scheme; `stdout` for `-` and `stdout:`."""
    text = url.strip()
    if text in ("-", "stdout:"):
        return "stdout", ""
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _bad(url, "it has no scheme")
    if scheme not in ("parquet", "jsonl", "iceberg"):
        raise _bad(url, f"unknown scheme {scheme!r}")
    return scheme, rest


def _iceberg_target(url: str, rest: str) -> tuple[str, str]:
    remote = remote_scheme(rest)
    if remote is not None:
        raise _bad(url, f"an iceberg sink names a catalog and a table, not a {remote}:// location")
    catalog, slash, identifier = rest.partition("/")
    if not catalog or not slash:
        raise _bad(url, "it names no catalog")
    if "/" in identifier or "." not in identifier or any(not part for part in identifier.split(".")):
        raise _bad(url, "the table must be written as NAMESPACE.TABLE after the catalog")
    if "?" in identifier or "#" in identifier:
        raise _bad(url, "an iceberg sink URL takes no query or fragment")
    return catalog, identifier


def _path(url: str, rest: str) -> str:
    if not rest or rest == "/":
        raise _bad(url, "it names no path")
    if "?" in rest or "#" in rest:
        raise _bad(url, "paths take no query or fragment")
    remote = remote_scheme(rest)
    if remote is not None:
        raise ConfigError(
            f"sink URL {url!r} points at {remote}://, but parquet:// and jsonl:// sinks write to the "
            "local filesystem only; write to a local or mounted path (parquet:///mnt/bucket/changes), or use "
            "iceberg://CATALOG/NS.TABLE for a table in object storage"
        )
    if rest.startswith("~"):
        raise _bad(url, "~ is not expanded; write the absolute path")
    return rest


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {url!r} is not usable: {reason}; accepted forms: {', '.join(ACCEPTED_FORMS)}")
