"""Every kind of sink a URL can name, in one table: how it is opened, and how it is reached first.

Accepted forms (docs/sinks.md is the user's view):

* `parquet://PATH`              - a directory of Parquet files, one per chunk; exactly once
* `parquet+s3://BUCKET/PREFIX`  - Parquet objects plus commit records (also gs, abfs); exactly once
* `iceberg://CATALOG/NS.TABLE`  - appends to an Iceberg table of a pyiceberg catalog; exactly once
* `iceberg://CATALOG/NS.TABLE?mode=mirror` - an Iceberg table kept equal to the source by key;
  exactly once (iceberg/mirror/)
* `iceberg://CATALOG/NS.TABLE?mode=history` - an Iceberg table holding every version of every key
  (SCD type 2); exactly once (iceberg/history/)
* `jsonl://PATH`                - appends JSON lines to a file; at least once
* `postgresql://USER@HOST:PORT/DB?table=SCHEMA.TABLE` - a PostgreSQL table kept equal to the
  source by key (a mirror, or `&mode=history`); exactly once (postgres/)
* `nats://[USER:PASSWORD@]HOST:PORT/SUBJECT_PREFIX?stream=NAME[&create=true][&key=COL,...]` - a
  NATS JetStream stream, one Debezium envelope per change on `SUBJECT_PREFIX.NS.TABLE[.KEY]`;
  exactly once within the stream's duplicate window (nats/)
* `redis-stream://[USER:PASSWORD@]HOST:PORT/KEY[?create=true][&key=COL,...][&maxlen=N]` - a Redis
  stream, one Debezium envelope per change as an entry; exactly once by a per-consumer mark (redis/)
* `rabbitmq-stream://[USER:PASSWORD@]HOST:PORT/STREAM[?create=true][&key=COL,...]` - a RabbitMQ
  stream (the stream protocol), one Debezium envelope per change; exactly once (rabbitmq/)
* `tls://...`, `rediss-stream://...`, `rabbitmq-stream+tls://...` - the three above over TLS, with
  `ca=PATH`, `cert=PATH&cert_key=PATH` (bus/tls.py)
* `-` or `stdout:`              - JSON lines to standard output; at least once

A URL is parsed once, without side effects and without importing any driver (urls.py: the forms,
the query parameters each kind takes, the extras it needs), into a `SinkTarget` that travels in the
consumer's configuration (PipelineConfig.sink_target) to `check_sink_reachable` and `open_sink`.
Its kind is looked up in SINK_KINDS (as pyiceberg looks a catalog type up in AVAILABLE_CATALOGS),
and only that sink's module is imported to open it. A new kind of sink is a folder of its own and
one entry here. What a sink can do (stage chunks in Spark tasks, commit or write groups, keep a
key, take its own envelopes) is what its class implements of the contracts in base.py and
keyed/contract.py; the pipeline's way of delivering is chosen from that in one place
(monitor/engine/delivery/choice.py). The Debezium envelope is put around a sink here, the same way
for every kind (`formatted`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from icetail.kernel.names import check_consumer_id
from icetail.sinks.base import Sink
from icetail.sinks.nats.url import NatsTarget
from icetail.sinks.postgres.url import MirrorTarget
from icetail.sinks.rabbitmq.url import RabbitStreamTarget
from icetail.sinks.redis.url import RedisTarget
from icetail.sinks.urls import SinkTarget, parse_sink_url

__all__ = ["SINK_KINDS", "SinkKind", "check_sink_reachable", "formatted", "kind_of", "open_sink"]

Opener = Callable[[SinkTarget, str, "pa.Schema | None"], Sink]  # (target, consumer, schema)


@dataclass(frozen=True)
class SinkKind:
    """One kind of sink: what it is called, how it is opened, and how its target is reached first."""

    name: str
    open: Opener
    # reaches the target without changing it, so a refused run creates nothing (None: the URL says all)
    reach: Callable[[SinkTarget], None] | None = None


def _path(target: SinkTarget) -> str:
    assert target.path is not None  # parse_sink_url gives every file sink a path
    return target.path


def _table(target: SinkTarget) -> tuple[str, str]:
    assert target.catalog is not None and target.identifier is not None  # ... and every iceberg sink a table
    return target.catalog, target.identifier


def _mirror(target: SinkTarget) -> MirrorTarget:
    assert target.postgres is not None  # ... and every postgresql sink its connection
    return target.postgres


def _nats(target: SinkTarget) -> NatsTarget:
    assert target.nats is not None  # ... and every nats sink its server and stream
    return target.nats


def _redis(target: SinkTarget) -> RedisTarget:
    assert target.redis is not None  # ... and every redis-stream sink its server and key
    return target.redis
def _rabbitmq(target: SinkTarget) -> RabbitStreamTarget:
    assert target.rabbitmq is not None  # ... and every rabbitmq-stream sink its broker and stream
    return target.rabbitmq


def _open_parquet(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.files.parquet import ParquetDirSink

    return ParquetDirSink(_path(target), consumer=consumer)


def _open_object_store(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.files.object_store import ObjectParquetSink

    return ObjectParquetSink(target.scheme.removeprefix("parquet+"), _path(target), consumer=consumer)


def _open_jsonl(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.files.jsonl import JsonlFileSink

    return JsonlFileSink(_path(target), consumer=consumer)


def _open_stdout(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.files.jsonl import StdoutSink

    return StdoutSink()


def _open_iceberg_changelog(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.iceberg.changelog import IcebergTableSink

    return IcebergTableSink(*_table(target), consumer=consumer, schema=schema)


def _open_iceberg_mirror(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink

    return IcebergMirrorSink(*_table(target), consumer=consumer)


def _open_iceberg_history(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.iceberg.history.sink import IcebergHistorySink

    return IcebergHistorySink(*_table(target), consumer=consumer)


def _reach_catalog(target: SinkTarget) -> None:
    from icetail.catalogs import open_catalog

    open_catalog(_table(target)[0])


def _open_postgres(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.postgres.mirror import PostgresMirrorSink  # psycopg is imported only when used

    return PostgresMirrorSink(_mirror(target), consumer=consumer)


def _reach_postgres(target: SinkTarget) -> None:
    from icetail.sinks.postgres.mirror import check_reachable

    check_reachable(_mirror(target))


def _open_nats(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.nats.sink import NatsSink  # nats-py is imported only when used

    return NatsSink(_nats(target), consumer=consumer)


def _reach_nats(target: SinkTarget) -> None:
    from icetail.sinks.nats.sink import check_reachable

    check_reachable(_nats(target))


def _open_redis(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.redis.sink import RedisStreamSink  # redis-py is imported only when used

    return RedisStreamSink(_redis(target), consumer=consumer)


def _reach_redis(target: SinkTarget) -> None:
    from icetail.sinks.redis.sink import check_reachable

    check_reachable(_redis(target))
def _open_rabbitmq(target: SinkTarget, consumer: str, schema: pa.Schema | None) -> Sink:
    from icetail.sinks.rabbitmq.sink import RabbitStreamSink  # rstream is imported only when used

    return RabbitStreamSink(_rabbitmq(target), consumer=consumer)


def _reach_rabbitmq(target: SinkTarget) -> None:
    from icetail.sinks.rabbitmq.sink import check_reachable

    check_reachable(_rabbitmq(target))


SINK_KINDS: dict[str, SinkKind] = {
    "parquet": SinkKind("parquet folder", _open_parquet),
    "parquet+store": SinkKind("parquet on an object store", _open_object_store),
    "jsonl": SinkKind("JSON lines file", _open_jsonl),
    "stdout": SinkKind("JSON lines on stdout", _open_stdout),
    "iceberg": SinkKind("Iceberg changelog table", _open_iceberg_changelog, _reach_catalog),
    "iceberg+mirror": SinkKind("Iceberg mirror", _open_iceberg_mirror, _reach_catalog),
    "iceberg+history": SinkKind("Iceberg history", _open_iceberg_history, _reach_catalog),
    "postgresql": SinkKind("PostgreSQL mirror or history", _open_postgres, _reach_postgres),
    "nats": SinkKind("NATS JetStream stream", _open_nats, _reach_nats),
    "redis-stream": SinkKind("Redis stream", _open_redis, _reach_redis),
    "rabbitmq-stream": SinkKind("RabbitMQ stream", _open_rabbitmq, _reach_rabbitmq),
}


def kind_of(target: SinkTarget) -> SinkKind:
    """The entry of SINK_KINDS for a parsed URL."""
    if target.scheme.startswith("parquet+"):
        return SINK_KINDS["parquet+store"]
    if target.scheme == "iceberg" and target.mode is not None:
        return SINK_KINDS[f"iceberg+{target.mode}"]
    return SINK_KINDS[target.scheme]


def open_sink(
    url: str | SinkTarget,
    *,
    consumer: str,
    schema: pa.Schema | None = None,
    output_format: str = "changelog",
    table: str = "",
) -> Sink:
    """A sink for `url` (or the target it was parsed into), for `consumer`; `output_format="debezium"`
    puts the envelope around it (of rows of `table`, NS.TABLE). ConfigError names the URL and the
    accepted forms when it cannot be used.

    `schema` (the change rows' schema, optional) lets the iceberg sink create its table at
    open rather than at the first write; the other sinks ignore it.
    """
    check_consumer_id(consumer)  # it becomes part of file and object names
    target = parse_sink_url(url) if isinstance(url, str) else url
    return formatted(kind_of(target).open(target, consumer, schema), output_format, table)


def formatted(sink: Sink, output_format: str, table: str) -> Sink:
    """`sink` as it takes rows in `output_format`: Debezium envelopes around it, or itself. A sink that
    takes envelopes only (a message bus) gets them whatever the format."""
    from icetail.sinks.debezium import EnvelopeOnlySink, EnvelopeSink

    if output_format != "debezium" and not isinstance(sink, EnvelopeOnlySink):
        return sink
    if output_format != "debezium" and not table:  # the caller wraps it once it knows the table
        return sink

    return sink if isinstance(sink, EnvelopeSink) else EnvelopeSink(sink, table)


def check_sink_reachable(target: SinkTarget) -> None:
    """Reach the sink of a parsed URL without changing it, so a run refuses before it creates anything:
    a PostgreSQL sink's database, role and password (SinkSetupError, or SinkError if it cannot be
    reached), an iceberg sink's catalog, a NATS or RabbitMQ sink's server and stream, a Redis stream
    sink's server and key. The other sinks are checked by their URL alone."""
    reach = kind_of(target).reach
    if reach is not None:
        reach(target)
