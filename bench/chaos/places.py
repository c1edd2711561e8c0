"""Checkpoint stores and sinks of a trial: their URLs (PostgreSQL through the cuttable proxy) and
what a sink holds, read back by the harness directly (never through the proxy)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from bench.chaos import bus
from bench.chaos.s3 import aws_env, new_bucket
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.s3 import MotoServer, S3Catalog, new_s3_catalog
from tests.support.sinks import read_parquet_sink
from tests.support.stores import PG_URL

EXACTLY_ONCE = {
    "parquet": True,
    "iceberg": True,
    "pgmirror": True,
    "jsonl": False,
    "parquet+s3": True,
    "iceberg+s3": True,
    "icemirror": True,
    "icehistory": True,
    "pghistory": True,
    "icemirror+s3": True,
    "nats": True,  # Nats-Msg-Id within the stream's duplicate window
    "redis": True,  # the consumer's mark, moved by the script that appends
    "rabbitmq": True,  # producer names and publishing ids
}
BUS_SINKS = bus.BUS_SINKS  # a stream of Debezium envelopes on a server, one per trial
S3_SINKS = ("parquet+s3", "iceberg+s3", "icemirror+s3")
MIRRORS = ("pgmirror", "icemirror", "icemirror+s3")  # the target equals the source at the cursor
HISTORIES = ("pghistory", "icehistory")  # the target holds every version of every key (SCD type 2)
PG_SINKS = ("pgmirror", "pghistory")
# the sinks whose target is an Iceberg table (a second writer can commit to it: `sink-writer`)
ICEBERG_TARGETS = ("iceberg", "iceberg+s3", "icemirror", "icehistory", "icemirror+s3")
TARGET_IDENT = {"iceberg": "out.changes", "iceberg+s3": "out.changes", "icemirror": "out.mirror",
                "icemirror+s3": "out.mirror", "icehistory": "out.history"}  # fmt: skip


def pg_url(port: int | None) -> str:
    """PG_URL, through the proxy on `port` when given."""
    if port is None:
        return PG_URL
    scheme, rest = PG_URL.split("://", 1)
    user, hostpart = rest.split("@", 1)
    db = hostpart.split("/", 1)[1]
    return f"{scheme}://{user}@127.0.0.1:{port}/{db}"


def pg_execute(statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


@dataclass(frozen=True)
class Store:
    kind: str
    url: str  # what `icetail run` gets (PostgreSQL: through the proxy)
    direct_url: str  # what the harness reads
    schema: str | None = None

    def drop(self) -> None:
        if self.schema is not None:
            pg_execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def new_store(kind: str, work: Path, proxy_port: int | None) -> Store:
    if kind == "sqlite":
        (work / "state").mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{(work / 'state').resolve()}/state.db"
        return Store(kind, url, url)
    schema = f"icetail_chaos_{uuid.uuid4().hex[:10]}"
    return Store(kind, f"{pg_url(proxy_port)}?schema={schema}", f"{PG_URL}?schema={schema}", schema)


@dataclass(frozen=True)
class Sink:
    """A sink of a trial. `read()` returns its rows: change rows, or the target table (mirrors, histories)."""

    kind: str
    url: str
    path: Path | None = None  # parquet folder, jsonl file
    catalog: LocalCatalog | None = None  # iceberg
    schema: str | None = None  # pgmirror: the target's schema, table `t`
    server: MotoServer | None = None  # the S3 sinks: the server, read directly
    bucket: str = ""  # parquet+s3
    s3catalog: S3Catalog | None = None  # iceberg+s3
    endpoint: str = ""  # the S3 sinks: what `icetail run` reaches the server at (the proxy)
    stream: str = ""  # the bus sinks: the stream (NATS, RabbitMQ) or stream key (Redis)

    @property
    def exactly_once(self) -> bool:
        return EXACTLY_ONCE[self.kind]

    @property
    def keyed(self) -> bool:
        """A mirror or a history: a table by key, not a change stream."""
        return self.kind in MIRRORS or self.kind in HISTORIES

    @property
    def extra_args(self) -> list[str]:
        """A mirror or a history by `id`; a bus sink too (`key=id`: keyed subjects and entries, and an
        UPDATE within one snapshot paired into one `u` envelope)."""
        return ["--identifier-columns", "id"] if self.keyed or self.kind in BUS_SINKS else []

    def iceberg_target(self) -> Table | None:
        """The Iceberg sink's target table as it is now (None before the sink created it)."""
        if self.kind not in ICEBERG_TARGETS:
            raise ValueError(f"{self.kind}: not an Iceberg target")
        cat = self.catalog if self.catalog is not None else self.s3catalog
        assert cat is not None
        return cat.try_load(TARGET_IDENT[self.kind])

    def env(self) -> dict[str, str]:
        if self.catalog is not None:
            return self.catalog.env()
        out = aws_env(self.endpoint) if self.endpoint else {}
        if self.s3catalog is not None:
            out.update(self.s3catalog.env())
            out[f"PYICEBERG_CATALOG__{self.s3catalog.name.upper()}__S3__ENDPOINT"] = self.endpoint
        return out

    def read(self) -> pa.Table | None:
        if self.kind == "parquet":
            assert self.path is not None
            return read_parquet_sink(self.path)
        if self.kind in PG_SINKS:
            return self._read_mirror()
        if self.kind == "parquet+s3":
            return self._read_objects()
        if self.kind in ICEBERG_TARGETS:
            table = self.iceberg_target()
            return table.scan().to_arrow() if table is not None and table.current_snapshot() is not None else None
        raise ValueError(f"{self.kind}: use read_jsonl or read_envelopes")

    def read_envelopes(self) -> list[bus.Envelope]:
        """A bus sink's messages, in stream order."""
        if self.kind not in BUS_SINKS:
            raise ValueError(f"{self.kind}: not a bus sink")
        return bus.read(self.kind, self.stream)

    def read_jsonl(self) -> tuple[list[dict[str, Any]], int]:
        """The JSON lines sink's objects and how many lines were torn (not one whole JSON object)."""
        assert self.path is not None
        if not self.path.exists():
            return [], 0
        objects, torn = [], 0
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            torn += 1  # no newline at the end: a torn tail
            lines.pop()
        for line in lines:
            try:
                value = json.loads(line)
            except ValueError:
                torn += 1
                continue
            if isinstance(value, dict):
                objects.append(value)
            else:
                torn += 1
        return objects, torn

    def _read_objects(self) -> pa.Table | None:
        """The committed chunks of the parquet+s3 sink: data objects that have a commit record."""
        import pyarrow.dataset as ds
        from pyarrow import fs

        assert self.server is not None
        s3 = self.server.fs()
        prefix = f"{self.bucket}/changes"
        records = s3.get_file_info(fs.FileSelector(f"{prefix}/_committed", allow_not_found=True))
        names = sorted(Path(i.path).name.removesuffix(".json") for i in records if i.path.endswith(".json"))
        if not names:
            return None
        paths = [f"{prefix}/{n}.parquet" for n in names]
        dataset = ds.dataset(paths, filesystem=s3, format="parquet")
        schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
        return ds.dataset(paths, filesystem=s3, format="parquet", schema=schema).to_table()

    def _read_mirror(self) -> pa.Table | None:
        assert self.schema is not None
        try:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
                cur = conn.execute(f'SELECT * FROM "{self.schema}".t')
                names = [d.name for d in cur.description or ()]
                rows = cur.fetchall()
        except Exception:  # noqa: BLE001 - no target yet
            return None
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})

    def drop(self) -> None:
        if self.schema is not None:
            pg_execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        if self.stream:
            bus.drop(self.kind, self.stream)


def new_sink(
    kind: str, work: Path, proxy_port: int | None, server: MotoServer | None = None, s3_port: int | None = None
) -> Sink:
    """The trial's sink; the S3 sinks need the `server` and the port of the proxy in front of it."""
    if kind in S3_SINKS:
        assert server is not None and s3_port is not None
        endpoint = f"http://127.0.0.1:{s3_port}"
        if kind == "parquet+s3":
            bucket = new_bucket(server)
            return Sink(kind, f"parquet+s3://{bucket}/changes", server=server, bucket=bucket, endpoint=endpoint)
        s3cat = new_s3_catalog(server, work / "sinkcatalog", "chaoss3sink")
        url = f"iceberg://chaoss3sink/{TARGET_IDENT[kind]}" + ("?mode=mirror" if kind == "icemirror+s3" else "")
        return Sink(kind, url, server=server, s3catalog=s3cat, endpoint=endpoint)
    if kind == "parquet":
        path = (work / "sink").resolve()
        return Sink(kind, f"parquet://{path}", path=path)
    if kind == "jsonl":
        path = (work / "sink" / "changes.jsonl").resolve()
        return Sink(kind, f"jsonl://{path}", path=path)
    if kind in ("iceberg", "icemirror", "icehistory"):
        cat = new_catalog(work / "sinkcatalog", "chaossink")
        mode = {"icemirror": "?mode=mirror", "icehistory": "?mode=history"}.get(kind, "")
        return Sink(kind, f"iceberg://chaossink/{TARGET_IDENT[kind]}{mode}", catalog=cat)
    if kind in PG_SINKS:
        schema = f"icetail_chaos_m_{uuid.uuid4().hex[:10]}"
        pg_execute(f'CREATE SCHEMA "{schema}"')
        mode = "&mode=history" if kind == "pghistory" else ""
        return Sink(kind, f"{pg_url(proxy_port)}?table={schema}.t{mode}", schema=schema)
    if kind in BUS_SINKS:
        stream, url = bus.new_stream(kind)
        return Sink(kind, url, stream=stream)
    raise ValueError(kind)
