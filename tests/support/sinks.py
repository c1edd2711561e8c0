"""Sinks under test: what a parquet or Iceberg sink holds, how much it has grown, and a sink that "crashes"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from tests.support.catalogs import LocalCatalog, new_catalog


@dataclass(frozen=True)
class SinkSpec:
    """A sink under test: its URL, and how to read and watch what it holds."""

    kind: str  # parquet | iceberg
    url: str
    directory: Path | None = None  # parquet
    catalog: LocalCatalog | None = None  # iceberg
    ident: str | None = None  # iceberg

    def read(self) -> pa.Table | None:
        if self.kind == "parquet":
            assert self.directory is not None
            return read_parquet_sink(self.directory)
        assert self.catalog is not None and self.ident is not None
        return read_iceberg_sink(self.catalog, self.ident)

    def writes_started(self) -> int:
        """Grows when a sink write begins (parquet: a `_tmp` file; iceberg: a data file)."""
        if self.kind == "parquet":
            assert self.directory is not None
            return sum(1 for _ in self.directory.rglob("*.parquet")) if self.directory.exists() else 0
        assert self.catalog is not None
        return sum(1 for _ in self.catalog.warehouse_path.rglob("data/*.parquet"))

    def writes_done(self) -> int:
        """Grows when a sink write lands (parquet: the rename into place; iceberg: new table metadata)."""
        if self.kind == "parquet":
            assert self.directory is not None
            return sum(1 for _ in self.directory.glob("*.parquet")) if self.directory.exists() else 0
        assert self.catalog is not None
        return sum(1 for _ in self.catalog.warehouse_path.rglob("*.metadata.json"))

    def probe(self, kind: str) -> int:
        return self.writes_started() if kind == "started" else self.writes_done()

    def fingerprint(self) -> tuple[Any, ...]:
        """Changes whenever the sink's committed content could have changed."""
        if self.kind == "parquet":
            assert self.directory is not None
            return tuple(
                sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in self.directory.glob("*.parquet"))
            )
        assert self.catalog is not None and self.ident is not None
        table = self.catalog.try_load(self.ident)
        if table is None:
            return ()
        return (table.metadata_location, tuple(s.snapshot_id for s in table.metadata.snapshots))


class SimulatedCrash(Exception):
    """Raised by CrashingSink: the process 'dies' here."""


class CrashingSink:
    """A real sink that 'crashes' on its `crash_on`-th write, before or after the write lands."""

    def __init__(self, inner: Any, crash_on: int, *, after_write: bool) -> None:
        self.inner = inner
        self.crash_on = crash_on
        self.after_write = after_write
        self.exactly_once = inner.exactly_once
        self.writes = 0

    def write(self, key: Any, rows: pa.Table) -> str | None:
        self.writes += 1
        if self.writes == self.crash_on and not self.after_write:
            raise SimulatedCrash(f"before write {self.writes} ({key.name})")
        token = self.inner.write(key, rows)
        if self.writes == self.crash_on and self.after_write:
            raise SimulatedCrash(f"after write {self.writes} ({key.name})")
        return token  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def make_sink(kind: str, root: Path, catalog_name: str = "sinkcat", ident: str = "out.changes") -> SinkSpec:
    if kind == "parquet":
        directory = (root / "sink").resolve()
        return SinkSpec("parquet", f"parquet://{directory}", directory=directory)
    if kind == "iceberg":
        cat = new_catalog(root / "sinkcatalog", catalog_name)
        return SinkSpec("iceberg", f"iceberg://{catalog_name}/{ident}", catalog=cat, ident=ident)
    raise ValueError(kind)


def read_parquet_sink(directory: Path) -> pa.Table | None:
    """Committed chunks of a parquet sink directory (`_tmp` is skipped by pyarrow's dataset)."""
    if not directory.exists():
        return None
    dataset = ds.dataset(directory, format="parquet")
    if not dataset.files:
        return None
    assert all("/_tmp/" not in f for f in dataset.files), dataset.files
    # chunk files written before a schema change lack the new column: unify their schemas
    schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
    return ds.dataset(directory, format="parquet", schema=schema).to_table()


def read_iceberg_sink(cat: LocalCatalog, ident: str) -> pa.Table | None:
    table = cat.try_load(ident)
    if table is None or table.current_snapshot() is None:
        return None
    return table.scan().to_arrow()
