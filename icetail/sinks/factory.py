"""Open a sink from its URL.

Accepted forms (see docs/sinks.md):

* `parquet://PATH`              - a directory of Parquet files, one per chunk; exactly once
* `parquet+s3://BUCKET/PREFIX`  - Parquet objects plus commit records (also gs, abfs); exactly once
* `iceberg://CATALOG/NS.TABLE`  - appends to an Iceberg table of a pyiceberg catalog; exactly once
* `iceberg://CATALOG/NS.TABLE?mode=mirror` - an Iceberg table kept equal to the source by key;
  exactly once (iceberg_mirror.py)
* `iceberg://CATALOG/NS.TABLE?mode=history` - an Iceberg table holding every version of every key
  (SCD type 2); exactly once (iceberg_history.py)
* `jsonl://PATH`                - appends JSON lines to a file; at least once
* `postgresql://USER@HOST:PORT/DB?table=SCHEMA.TABLE` - a PostgreSQL table kept equal to the
  source by key (a mirror); exactly once (sinks/pg_mirror/)
* `-` or `stdout:`              - JSON lines to standard output; at least once

PATH is everything after `scheme://`, taken literally: a leading `/` makes it absolute
(`parquet:///data/changes` is `/data/changes`), anything else is relative to the working
directory (`parquet://out/changes` is `./out/changes`). The file sinks write to the local
filesystem only: a PATH that is itself a URL (`parquet://s3://bucket/x`) or starts with `~`
(not expanded) is refused rather than written to a local folder of that name.

`parse_sink_url` checks a URL without side effects; `normalize_sink_url` gives the form a
consumer's sink is recorded and compared in.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pyarrow as pa

from icetail.kernel.errors import ConfigError
from icetail.kernel.names import check_consumer_id
from icetail.kernel.secrets import redact_text
from icetail.sinks.base import Sink
from icetail.sinks.iceberg_sink import IcebergTableSink
from icetail.sinks.jsonl_sink import JsonlFileSink, StdoutSink
from icetail.sinks.object_parquet_sink import SCHEMES as OBJECT_SCHEMES
from icetail.sinks.object_parquet_sink import ObjectParquetSink
from icetail.sinks.parquet_sink import ParquetDirSink
from icetail.sinks.pg_mirror.url import SCHEMES as POSTGRES_SCHEMES
from icetail.sinks.pg_mirror.url import parse_mirror_url

ACCEPTED_FORMS = (
    "parquet:///abs/dir",
    "parquet://rel/dir",
    "parquet+s3://BUCKET/PREFIX",
    "iceberg://CATALOG/NS.TABLE",
    "iceberg://CATALOG/NS.TABLE?mode=mirror",
    "iceberg://CATALOG/NS.TABLE?mode=history",
    "jsonl:///abs/file.jsonl",
    "jsonl://rel/file.jsonl",
    "postgresql://USER@HOST:PORT/DB?table=SCHEMA.TABLE",
    "-",
    "stdout:",
)
_URL_AT_START = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")
_URL_INSIDE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class SinkTarget:
    """What a sink URL names, parsed without touching it: `scheme` plus a path or a table."""

    scheme: str  # parquet | parquet+STORE (an object store: s3, gs, abfs) | jsonl | iceberg | postgresql | stdout
    path: str | None = None  # a local path for parquet/jsonl, BUCKET/PREFIX for an object store
    catalog: str | None = None
    identifier: str | None = None  # NS.TABLE of an iceberg sink; for postgresql the URL without its password
    mode: str | None = None  # an iceberg sink's ?mode=: None (the changelog), "mirror" or "history"


def remote_scheme(path: str) -> str | None:
    """The scheme if `path` holds a URL (`s3://b/x`, `/s3://b/x` -> `s3`) rather than a local path."""
    match = _URL_AT_START.match(path) or _URL_INSIDE.search(path)
    return match.group(1) if match else None


def parse_sink_url(url: str) -> SinkTarget:
    """The target `url` names, with no side effect (nothing is created, opened or removed).

    A URL that cannot be used raises ConfigError naming it and the accepted forms. The pipeline
    checks a URL with this before it touches the state, and opens the sink only once it holds
    the consumer's lease: opening a sink may clear the consumer's staged leftovers, which belong
    to whichever run holds the lease.
    """
    text = url.strip()
    if text in ("-", "stdout:"):
        return SinkTarget("stdout")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _bad(url, "it has no scheme")
    if scheme in ("parquet", "jsonl"):
        return SinkTarget(scheme, path=_local_path(url, rest))
    if scheme.startswith("parquet+"):
        store = scheme.removeprefix("parquet+")
        if store not in OBJECT_SCHEMES:
            raise _bad(url, f"unknown object store {store!r} (one of {', '.join(OBJECT_SCHEMES)})")
        return SinkTarget(scheme, path=_path(url, rest).strip("/"))
    if scheme == "iceberg":
        catalog, identifier, mode = _iceberg_target(url, rest)
        return SinkTarget(scheme, catalog=catalog, identifier=identifier, mode=mode)
    if scheme in POSTGRES_SCHEMES:  # its messages never show the password
        return SinkTarget("postgresql", identifier=parse_mirror_url(text).identity)
    raise _bad(url, f"unknown scheme {scheme!r}")


def normalize_sink_url(url: str) -> str:
    """One spelling per sink: file paths absolute (relative ones against the working directory),
    stdout as `stdout:`, the scheme lower case. Two URLs naming the same sink normalize equal.
    ConfigError for a URL `open_sink` would refuse."""
    target = parse_sink_url(url)
    if target.scheme == "stdout":
        return "stdout:"
    if target.scheme in ("parquet", "jsonl"):
        assert target.path is not None
        return f"{target.scheme}://{os.path.normpath(os.path.abspath(target.path))}"
    if target.scheme.startswith("parquet+"):
        return f"{target.scheme}://{target.path}"
    if target.scheme == "postgresql":
        assert target.identifier is not None
        return target.identifier
    query = f"?mode={target.mode}" if target.mode else ""
    return f"iceberg://{target.catalog}/{target.identifier}{query}"


def open_sink(url: str, *, consumer: str, schema: pa.Schema | None = None) -> Sink:
    """The sink `url` names, opened for `consumer`.

    `schema` (the change rows' schema, optional) lets the iceberg sink create its table at
    open rather than at the first write; the other sinks ignore it.
    """
    check_consumer_id(consumer)  # it becomes part of file and object names
    target = parse_sink_url(url)
    if target.scheme == "parquet":
        assert target.path is not None
        return ParquetDirSink(target.path, consumer=consumer)
    if target.scheme.startswith("parquet+"):
        assert target.path is not None
        return ObjectParquetSink(target.scheme.removeprefix("parquet+"), target.path, consumer=consumer)
    if target.scheme == "jsonl":
        assert target.path is not None
        return JsonlFileSink(target.path, consumer=consumer)
    if target.scheme == "iceberg":
        assert target.catalog is not None and target.identifier is not None
        if target.mode == "mirror":
            from icetail.sinks.iceberg_mirror import IcebergMirrorSink

            return IcebergMirrorSink(target.catalog, target.identifier, consumer=consumer)
        if target.mode == "history":
            from icetail.sinks.iceberg_history import IcebergHistorySink

            return IcebergHistorySink(target.catalog, target.identifier, consumer=consumer)
        return IcebergTableSink(target.catalog, target.identifier, consumer=consumer, schema=schema)
    if target.scheme == "postgresql":
        from icetail.sinks.pg_mirror.sink import PostgresMirrorSink  # psycopg is imported only when used

        return PostgresMirrorSink(url, consumer=consumer)
    return StdoutSink()


def _iceberg_target(url: str, rest: str) -> tuple[str, str, str | None]:
    """(catalog, NS.TABLE, mode) of an iceberg sink URL; the only query it takes is `?mode=mirror|history`."""
    rest, question, query = rest.partition("?")
    mode = None
    if question:
        if query not in ("mode=mirror", "mode=history"):
            raise _bad(url, "the only query an iceberg sink URL takes is ?mode=mirror or ?mode=history")
        mode = query.removeprefix("mode=")
    remote = remote_scheme(rest)
    if remote is not None:
        raise _bad(url, f"an iceberg sink names a catalog and a table, not a {remote}:// location")
    catalog, slash, identifier = rest.partition("/")
    if not catalog or not slash:
        raise _bad(url, "it names no catalog")
    if "/" in identifier or "." not in identifier or any(not part for part in identifier.split(".")):
        raise _bad(url, "the table must be written as NAMESPACE.TABLE after the catalog")
    if "#" in identifier:
        raise _bad(url, "an iceberg sink URL takes no fragment")
    return catalog, identifier, mode


def _path(url: str, rest: str) -> str:
    if not rest or rest == "/":
        raise _bad(url, "it names no path")
    if "?" in rest or "#" in rest:
        raise _bad(url, "paths take no query or fragment")
    return rest


def _local_path(url: str, rest: str) -> str:
    """A parquet:// or jsonl:// path: local only, so a URL in it is refused, not made a folder."""
    path = _path(url, rest)
    remote = remote_scheme(path)
    if remote is not None:
        raise ConfigError(
            f"sink URL {url!r} points at {remote}://, but parquet:// and jsonl:// sinks write to the "
            "local filesystem only; for object storage use parquet+s3://BUCKET/PREFIX (also gs, abfs) "
            "or iceberg://CATALOG/NS.TABLE, or write to a mounted path (parquet:///mnt/bucket/changes)"
        )
    if path.startswith("~"):
        raise _bad(url, "~ is not expanded; write the absolute path")
    return path


def _bad(url: str, reason: str) -> ConfigError:
    shown = redact_text(url)  # a mistyped postgresql:// URL may hold a password
    return ConfigError(f"sink URL {shown!r} is not usable: {reason}; accepted forms: {', '.join(ACCEPTED_FORMS)}")
