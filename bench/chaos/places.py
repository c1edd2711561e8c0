"""Checkpoint stores and sinks of a trial: their URLs (PostgreSQL through the cuttable proxy) and
what a sink holds, read back by the harness directly (never through the proxy)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.sinks import read_iceberg_sink, read_parquet_sink
from tests.support.stores import PG_URL

EXACTLY_ONCE = {"parquet": True, "iceberg": True, "pgmirror": True, "jsonl": False}


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
    """A sink of a trial. `read()` returns its rows: change rows, or the mirrored table (pgmirror)."""

    kind: str
    url: str
    path: Path | None = None  # parquet folder, jsonl file
    catalog: LocalCatalog | None = None  # iceberg
    schema: str | None = None  # pgmirror: the target's schema, table `t`

    @property
    def exactly_once(self) -> bool:
        return EXACTLY_ONCE[self.kind]

    @property
    def extra_args(self) -> list[str]:
        return ["--identifier-columns", "id"] if self.kind == "pgmirror" else []

    def env(self) -> dict[str, str]:
        return self.catalog.env() if self.catalog is not None else {}

    def read(self) -> pa.Table | None:
        if self.kind == "parquet":
            assert self.path is not None
            return read_parquet_sink(self.path)
        if self.kind == "iceberg":
            assert self.catalog is not None
            return read_iceberg_sink(self.catalog, "out.changes")
        if self.kind == "pgmirror":
            return self._read_mirror()
        raise ValueError(f"{self.kind}: use read_jsonl")

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


def new_sink(kind: str, work: Path, proxy_port: int | None) -> Sink:
    if kind == "parquet":
        path = (work / "sink").resolve()
        return Sink(kind, f"parquet://{path}", path=path)
    if kind == "jsonl":
        path = (work / "sink" / "changes.jsonl").resolve()
        return Sink(kind, f"jsonl://{path}", path=path)
    if kind == "iceberg":
        cat = new_catalog(work / "sinkcatalog", "chaossink")
        return Sink(kind, "iceberg://chaossink/out.changes", catalog=cat)
    if kind == "pgmirror":
        schema = f"icetail_chaos_m_{uuid.uuid4().hex[:10]}"
        pg_execute(f'CREATE SCHEMA "{schema}"')
        return Sink(kind, f"{pg_url(proxy_port)}?table={schema}.t", schema=schema)
    raise ValueError(kind)
