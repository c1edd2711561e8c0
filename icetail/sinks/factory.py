"""Open a sink from its URL.

Accepted forms (see docs/sinks.md):

* `parquet://PATH`              - a directory of Parquet files, one per chunk; exactly once
* `parquet+s3://BUCKET/PREFIX`  - Parquet objects plus commit records (also gs, abfs); exactly once
* `iceberg://CATALOG/NS.TABLE`  - appends to an Iceberg table of a pyiceberg catalog; exactly once
* `iceberg://CATALOG/NS.TABLE?mode=mirror` - an Iceberg table kept equal to the source by key;
  exactly once (iceberg/mirror/sink.py)
* `iceberg://CATALOG/NS.TABLE?mode=history` - an Iceberg table holding every version of every key
  (SCD type 2); exactly once (iceberg/history/sink.py)
* `jsonl://PATH`                - appends JSON lines to a file; at least once
* `postgresql://USER@HOST:PORT/DB?table=SCHEMA.TABLE` - a PostgreSQL table kept equal to the
  source by key (a mirror); exactly once (sinks/postgres/)
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

import pyarrow as pa

from icetail.kernel.names import check_consumer_id
from icetail.sinks.base import Sink
from icetail.sinks.files.jsonl import JsonlFileSink, StdoutSink
from icetail.sinks.files.object_store import ObjectParquetSink
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.iceberg.changelog import IcebergTableSink
from icetail.sinks.urls import parse_sink_url

__all__ = ["check_sink_reachable", "open_sink"]


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
            from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink

            return IcebergMirrorSink(target.catalog, target.identifier, consumer=consumer)
        if target.mode == "history":
            from icetail.sinks.iceberg.history.sink import IcebergHistorySink

            return IcebergHistorySink(target.catalog, target.identifier, consumer=consumer)
        return IcebergTableSink(target.catalog, target.identifier, consumer=consumer, schema=schema)
    if target.scheme == "postgresql":
        from icetail.sinks.postgres.mirror import PostgresMirrorSink  # psycopg is imported only when used

        return PostgresMirrorSink(url, consumer=consumer)
    return StdoutSink()


def check_sink_reachable(url: str) -> None:
    """Check `url` and reach the sink without changing it, so a run refuses before it creates anything:
    a PostgreSQL sink's database, role and password (SinkSetupError, or SinkError if it cannot be
    reached), an iceberg sink's catalog. The other sinks are checked by their URL alone."""
    target = parse_sink_url(url)
    if target.scheme == "postgresql":
        from icetail.sinks.postgres.mirror import check_reachable

        check_reachable(url)
    elif target.scheme == "iceberg":
        from icetail.catalogs import open_catalog

        assert target.catalog is not None
        open_catalog(target.catalog)
