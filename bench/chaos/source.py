"""The source table of a trial and the writer that commits to it while `icetail run` follows it.

Every kind is written by pyiceberg (no JVM in the harness): pyiceberg 0.12 writes deletes and
overwrites copy-on-write only (it falls back from merge-on-read with a warning), so the
merge-on-read kinds of issue 26 (position deletes, deletion vectors, equality deletes) need the
Java writer and are not covered yet. Inserted ids are unique across the trial, so a change row is
identified by (change, snapshot, row).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.types import StringType

from tests.support.catalogs import LocalCatalog
from tests.support.summaries import metadata_path
from tests.support.tables import BASE_SCHEMA, make_rows

IDENT = "ns.events"
LOCKED_RETRY_S = 90.0  # a writer waits out the `catalog-lock` fault (at most 20 s) as a real one would


def retry_while_locked(op: Callable[[], None]) -> None:
    """`op`, again while the catalog's SQLite file is locked by another process ("database is locked")."""
    deadline = time.monotonic() + LOCKED_RETRY_S
    while True:
        try:
            return op()
        except Exception as exc:
            text = str(exc)
            if ("locked" not in text and "SQLITE_BUSY" not in text) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass
class Writer:
    """Commits the kind's operations to the source table at seeded moments, in a thread."""

    cat: LocalCatalog
    kind: str
    rng: random.Random
    rows: int
    gap: tuple[float, float]
    next_id: int = 0
    version: int = 0
    committed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    liar: bool = False  # `verify-strict`: the first append after the table's creation gets a lying summary
    lie: int | None = None  # the snapshot whose summary lies
    ident: str = IDENT  # the table (a replicas trial follows several in one catalog)
    rounds: int = 1  # how many times the kind's operations are committed in turn
    _thread: threading.Thread | None = None

    def create(self) -> Table:
        """The table with its first append (a consumer then starts before it: all its rows are INSERTs)."""
        catalog = self.cat.catalog()
        catalog.create_namespace_if_not_exists("ns")
        table = catalog.create_table(
            self.ident,
            schema=BASE_SCHEMA,
            properties={"format-version": "2", "write.parquet.row-group-limit": "200"},
        )
        self._append(table, self.rows)
        return self.cat.load(self.ident)

    def operations(self) -> list[Callable[[], None]]:
        ops: dict[str, list[Callable[[], None]]] = {
            "append-delete": [self.append, self.delete, self.append, self.delete],
            "cow-overwrite": [self.overwrite, self.append, self.overwrite, self.delete],
            "schema-evolution": [self.append, self.add_column, self.append, self.overwrite],
        }
        return ops[self.kind] * self.rounds

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-writer", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        for op in self.operations():
            time.sleep(self.rng.uniform(*self.gap))
            try:
                retry_while_locked(op)
                self.committed.append(op.__name__)
            except Exception as exc:  # noqa: BLE001 - a writer failure is a trial finding, not a crash
                self.errors.append(f"{op.__name__}: {type(exc).__name__}: {exc}")

    # -- operations -----------------------------------------------------------------------------

    def _append(self, table: Table, n: int) -> None:
        ids = range(self.next_id, self.next_id + n)
        self.next_id += n
        table.append(make_rows(table.schema().as_arrow(), ids, version=self.version))

    def append(self) -> None:
        self._append(self.cat.load(self.ident), self.rng.randint(self.rows // 4, self.rows // 2))
        if self.liar and self.lie is None:
            self.lie = lie_about_added_records(self.cat.load(self.ident))

    def delete(self) -> None:
        lo = self.rng.randrange(0, max(1, self.next_id - 50))
        self.cat.load(self.ident).delete(f"id >= {lo} and id < {lo + self.rng.randint(5, 60)}")

    def overwrite(self) -> None:
        """Rows of a range rewritten with new values (a delete snapshot and an append snapshot)."""
        table = self.cat.load(self.ident)
        live = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        if not live:
            return self.append()
        lo = self.rng.choice(live)
        hi = lo + self.rng.randint(10, 80)
        keep = sorted(i for i in live if lo <= i < hi)
        self.version += 1
        rows: pa.Table = make_rows(table.schema().as_arrow(), keep, version=self.version)
        table.overwrite(rows, overwrite_filter=f"id >= {lo} and id < {hi}")
        return None

    def add_column(self) -> None:
        """`note`, then (a second round) `note2`, ..."""
        table = self.cat.load(self.ident)
        names = {f.name for f in table.schema().fields}
        name = next(n for n in ("note", *(f"note{i}" for i in range(2, 100))) if n not in names)
        with table.update_schema() as update:
            update.add_column(name, StringType())


def lie_about_added_records(table: Table) -> int:
    """The current snapshot's summary made to claim one row more than it added (a broken writer).

    Neither pyiceberg nor Java lets a commit set its counts, so the table's current metadata file
    is rewritten, by the writer thread itself right after its commit (nothing else commits to the
    table meanwhile), and atomically (a run reading it sees the old file or the new one)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    path = metadata_path(table)
    with open(path, encoding="utf-8") as stream:
        metadata = json.load(stream)
    (entry,) = [s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot.snapshot_id]
    entry["summary"]["added-records"] = str(int(entry["summary"]["added-records"]) + 1)
    with open(f"{path}.lie", "w", encoding="utf-8") as stream:
        json.dump(metadata, stream)
    os.replace(f"{path}.lie", path)
    return snapshot.snapshot_id
