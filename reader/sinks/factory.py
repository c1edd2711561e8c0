"""Open a sink from its URL.

Accepted forms (see docs/sinks.md):

* `parquet://PATH`              - a directory of Parquet files, one per chunk; exactly once
* `parquet+s3://BUCKET/PREFIX`  - Parquet objects plus commit records (also gs, abfs); exactly once
* `iceberg://CATALOG/NS.TABLE`  - appends to an Iceberg table of a pyiceberg catalog; exactly once
* `jsonl://PATH`                - appends JSON lines to a file; at least once
* `-` or `stdout:`              - JSON lines to standard output; at least once

PATH is everything after `scheme://`, taken literally: a leading `/` makes it absolute
(`parquet:///data/changes` is `/data/changes`), anything else is relative to the working
directory (`parquet://out/changes` is `./out/changes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from icetail.reader.sinks.base import Sink
from icetail.reader.sinks.iceberg_sink import IcebergTableSink
from icetail.reader.sinks.jsonl_sink import JsonlFileSink, StdoutSink
from icetail.reader.sinks.object_parquet_sink import SCHEMES as OBJECT_SCHEMES
from icetail.reader.sinks.object_parquet_sink import ObjectParquetSink
from icetail.reader.sinks.parquet_sink import ParquetDirSink
from icetail.state.errors import ConfigError

ACCEPTED_FORMS = (
    "parquet:///abs/dir",
    "parquet://rel/dir",
    "parquet+s3://BUCKET/PREFIX",
    "iceberg://CATALOG/NS.TABLE",
    "jsonl:///abs/file.jsonl",
    "jsonl://rel/file.jsonl",
    "-",
    "stdout:",
)


@dataclass(frozen=True)
class SinkTarget:
    """What a sink URL names, parsed without touching it: `scheme` plus a path or a table."""

    scheme: str  # parquet | parquet+STORE (an object store: s3, gs, abfs) | jsonl | iceberg | stdout
    path: str | None = None
    catalog: str | None = None
    identifier: str | None = None


def parse_sink_url(url: str) -> SinkTarget:
    """The target `url` names, with no side effect (nothing is created, opened or removed).

    A URL that cannot be used raises ConfigError naming it and the accepted forms. The pipeline
    checks a URL with this before it takes the consumer's lease, and opens the sink only once it
    holds the lease: opening a sink may clear the consumer's staged leftovers, which belong to
    whichever run holds the lease.
    """
    text = url.strip()
    if text in ("-", "stdout:"):
        return SinkTarget("stdout")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _bad(url, "it has no scheme")
    if scheme in ("parquet", "jsonl"):
        return SinkTarget(scheme, path=_path(url, rest))
    if scheme.startswith("parquet+"):
        store = scheme.removeprefix("parquet+")
        if store not in OBJECT_SCHEMES:
            raise _bad(url, f"unknown object store {store!r} (one of {', '.join(OBJECT_SCHEMES)})")
        return SinkTarget(scheme, path=_path(url, rest).strip("/"))
    if scheme == "iceberg":
        catalog, slash, identifier = rest.partition("/")
        if not catalog or not slash:
            raise _bad(url, "it names no catalog")
        if "/" in identifier or "." not in identifier or any(not part for part in identifier.split(".")):
            raise _bad(url, "the table must be written as NAMESPACE.TABLE after the catalog")
        return SinkTarget(scheme, catalog=catalog, identifier=identifier)
    raise _bad(url, f"unknown scheme {scheme!r}")


def open_sink(url: str, *, consumer: str, schema: pa.Schema | None = None) -> Sink:
    """The sink `url` names, opened for `consumer`.

    `schema` (the change rows' schema, optional) lets the iceberg sink create its table at
    open rather than at the first write; the other sinks ignore it.
    """
    if not consumer:
        raise ConfigError("open_sink needs a non-empty consumer id")
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
        return IcebergTableSink(target.catalog, target.identifier, consumer=consumer, schema=schema)
    return StdoutSink()


def _path(url: str, rest: str) -> str:
    if not rest or rest == "/":
        raise _bad(url, "it names no path")
    if "?" in rest or "#" in rest:
        raise _bad(url, "paths take no query or fragment")
    return rest


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {url!r} is not usable: {reason}; accepted forms: {', '.join(ACCEPTED_FORMS)}")
