"""Sink URLs parsed and normalized without side effects, importing only the standard library and the kernel.

The accepted forms are registry.py's. Each URL takes only its own query parameters (an iceberg
URL `mode`, a postgresql URL those of postgres/url.py and libpq's, a nats URL those of nats/url.py,
a redis-stream URL those of redis/url.py, a rabbitmq-stream URL those of rabbitmq/url.py,
the file sinks none), so a typo is refused with a did-you-mean instead of being ignored or passed
on to a driver. `parse_sink_url` also checks that the driver a sink needs is installed
(kernel/extras.py). `--help`, and every refusal that needs only the arguments, stay light: nothing
here imports pyarrow, pyiceberg, psycopg, nats-py, redis-py or rstream.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from icetail.kernel.errors import ConfigError
from icetail.kernel.url_params import unknown_parameter
from icetail.sinks.nats import url as nats_url
from icetail.sinks.postgres import url as pg_url
from icetail.sinks.rabbitmq import url as rabbitmq_url
from icetail.sinks.redis import url as redis_url

OBJECT_STORES = ("s3", "gs", "abfs")  # parquet+STORE://
ICEBERG_PARAMETERS = ("mode",)
ICEBERG_MODES = ("mirror", "history")
POSTGRES_SCHEMES = pg_url.SCHEMES

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
    "nats://HOST:PORT/SUBJECT_PREFIX?stream=NAME",
    "tls://HOST:PORT/SUBJECT_PREFIX?stream=NAME&ca=PATH",
    "redis-stream://HOST:PORT/KEY",
    "rediss-stream://HOST:PORT/KEY?ca=PATH",
    "rabbitmq-stream://USER@HOST:PORT/STREAM",
    "rabbitmq-stream+tls://USER@HOST:5551/STREAM?ca=PATH",
    "-",
    "stdout:",
)
_URL_AT_START = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")
_URL_INSIDE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class SinkTarget:
    """What a sink URL names, parsed without touching it: `scheme` plus a path or a table."""

    # parquet | parquet+STORE (object store: s3, gs, abfs) | jsonl | iceberg | postgresql | nats | redis-stream
    # | rabbitmq-stream | stdout
    scheme: str
    path: str | None = None  # a local path for parquet/jsonl, BUCKET/PREFIX for an object store
    catalog: str | None = None
    # NS.TABLE of an iceberg sink; for postgresql, nats, redis-stream and rabbitmq-stream the URL without its password
    identifier: str | None = None
    mode: str | None = None  # an iceberg sink's ?mode=: None (the changelog), "mirror" or "history"
    # a postgresql sink's connection and tables, parsed once with the rest (its repr shows no password)
    postgres: pg_url.MirrorTarget | None = field(default=None, compare=False)
    nats: nats_url.NatsTarget | None = field(default=None, compare=False)  # a nats sink's server and stream
    redis: redis_url.RedisTarget | None = field(default=None, compare=False)  # a redis-stream sink's server and key
    # a rabbitmq-stream sink's broker and stream
    rabbitmq: rabbitmq_url.RabbitStreamTarget | None = field(default=None, compare=False)

    def normalized(self) -> str:
        """One spelling per sink, as a consumer records it: file paths absolute (relative ones against
        the working directory), stdout as `stdout:`, the scheme lower case, a postgresql URL without
        its password. Two URLs naming the same sink normalize equal."""
        if self.scheme == "stdout":
            return "stdout:"
        if self.scheme in ("parquet", "jsonl"):
            assert self.path is not None
            return f"{self.scheme}://{os.path.normpath(os.path.abspath(self.path))}"
        if self.scheme.startswith("parquet+"):
            return f"{self.scheme}://{self.path}"
        if self.scheme in ("postgresql", "nats", redis_url.SCHEME, rabbitmq_url.SCHEME):
            assert self.identifier is not None
            return self.identifier
        query = f"?mode={self.mode}" if self.mode else ""
        return f"iceberg://{self.catalog}/{self.identifier}{query}"


def remote_scheme(path: str) -> str | None:
    """The scheme if `path` holds a URL (`s3://b/x`, `/s3://b/x` -> `s3`) rather than a local path."""
    match = _URL_AT_START.match(path) or _URL_INSIDE.search(path)
    return match.group(1) if match else None


def parse_sink_url(url: str) -> SinkTarget:
    """The target `url` names, with no side effect (nothing is created, opened or removed).

    A URL that cannot be used raises ConfigError naming it and the accepted forms. A consumer's
    URL is parsed once, where its configuration is built (PipelineConfig.sink_target); the pipeline
    reaches the target before it touches the state, and opens the sink only once it holds the
    consumer's lease: opening a sink may clear the consumer's staged leftovers, which belong to
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
        return SinkTarget(scheme, path=_local_path(url, rest))
    if scheme.startswith("parquet+"):
        store = scheme.removeprefix("parquet+")
        if store not in OBJECT_STORES:
            raise _bad(url, f"unknown object store {store!r} (one of {', '.join(OBJECT_STORES)})")
        return SinkTarget(scheme, path=_path(url, rest).strip("/"))
    if scheme == "iceberg":
        catalog, identifier, mode = _iceberg_target(url, rest)
        return SinkTarget(scheme, catalog=catalog, identifier=identifier, mode=mode)
    if scheme in POSTGRES_SCHEMES:  # its messages never show the password
        mirror = pg_url.parse_mirror_url(text)
        return SinkTarget("postgresql", identifier=mirror.identity, postgres=mirror)
    if scheme in nats_url.SCHEMES:  # nor a password or token
        target = nats_url.parse_nats_url(text)
        return SinkTarget("nats", identifier=target.identity, nats=target)
    if scheme in redis_url.SCHEMES:  # nor a password
        stream = redis_url.parse_redis_url(text)
        return SinkTarget(redis_url.SCHEME, identifier=stream.identity, redis=stream)
    if scheme in rabbitmq_url.SCHEMES:  # nor a password
        rabbit = rabbitmq_url.parse_rabbitmq_stream_url(text)
        return SinkTarget(rabbitmq_url.SCHEME, identifier=rabbit.identity, rabbitmq=rabbit)
    raise _bad(url, f"unknown scheme {scheme!r}")


def normalize_sink_url(url: str) -> str:
    """`url` as a consumer records its sink (`SinkTarget.normalized`), for a caller that holds only the text.
    ConfigError for a URL `open_sink` would refuse."""
    return parse_sink_url(url).normalized()


def _iceberg_target(url: str, rest: str) -> tuple[str, str, str | None]:
    """(catalog, NS.TABLE, mode) of an iceberg sink URL; the only query it takes is `?mode=mirror|history`."""
    rest, question, query = rest.partition("?")
    mode = None
    if question:
        params = parse_qsl(query, keep_blank_values=True)
        unknown = unknown_parameter((k for k, _ in params), ICEBERG_PARAMETERS)
        if unknown is not None:
            raise _bad(url, unknown)
        modes = [v for _, v in params]
        if len(modes) != 1 or modes[0] not in ICEBERG_MODES:
            raise _bad(url, f"the query of an iceberg sink URL is ?mode={' or ?mode='.join(ICEBERG_MODES)}")
        mode = modes[0]
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
    if "?" in rest:
        names = [k for k, _ in parse_qsl(rest.partition("?")[2], keep_blank_values=True)]
        raise _bad(url, unknown_parameter(names, ()) or "it takes no query")
    if "#" in rest:
        raise _bad(url, "paths take no fragment")
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
    shown = nats_url.shown(url)  # a mistyped postgresql:// or nats:// URL may hold a password or token
    return ConfigError(f"sink URL {shown!r} is not usable: {reason}; accepted forms: {', '.join(ACCEPTED_FORMS)}")
