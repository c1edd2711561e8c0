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


def open_sink(url: str, *, consumer: str, schema: pa.Schema | None = None) -> Sink:
    """The sink `url` names, opened for `consumer`.

    `schema` (the change rows' schema, optional) lets the iceberg sink create its table at
    open rather than at the first write; the other sinks ignore it. A URL that cannot be
    used raises ConfigError naming it and the accepted forms.
    """
    if not consumer:
        raise ConfigError("open_sink needs a non-empty consumer id")
    text = url.strip()
    if text in ("-", "stdout:"):
        return StdoutSink()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _bad(url, "it has no scheme")
    if scheme == "parquet":
        return ParquetDirSink(_path(url, rest), consumer=consumer)
    if scheme.startswith("parquet+"):
        store = scheme.removeprefix("parquet+")
        if store not in OBJECT_SCHEMES:
            raise _bad(url, f"unknown object store {store!r} (one of {', '.join(OBJECT_SCHEMES)})")
        return ObjectParquetSink(store, _path(url, rest).strip("/"), consumer=consumer)
    if scheme == "jsonl":
        return JsonlFileSink(_path(url, rest), consumer=consumer)
    if scheme == "iceberg":
        catalog, slash, identifier = rest.partition("/")
        if not catalog or not slash:
            raise _bad(url, "it names no catalog")
        if "/" in identifier or "." not in identifier or any(not part for part in identifier.split(".")):
            raise _bad(url, "the table must be written as NAMESPACE.TABLE after the catalog")
        return IcebergTableSink(catalog, identifier, consumer=consumer, schema=schema)
    raise _bad(url, f"unknown scheme {scheme!r}")


def _path(url: str, rest: str) -> str:
    if not rest or rest == "/":
        raise _bad(url, "it names no path")
    if "?" in rest or "#" in rest:
        raise _bad(url, "paths take no query or fragment")
    return rest


def _bad(url: str, reason: str) -> ConfigError:
    return ConfigError(f"sink URL {url!r} is not usable: {reason}; accepted forms: {', '.join(ACCEPTED_FORMS)}")
