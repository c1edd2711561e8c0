"""Append the change rows to another Iceberg table, exactly once per chunk.

Every commit is one append snapshot whose summary carries (`iceberg_ledger`)

* `icetail.consumer`   - the consumer id
* `icetail.chunk-id`   - `ChunkKey.name`, unique per consumer (or `icetail.chunk-ids`, comma-separated,
                         for a group of staged chunks committed together, `commit_staged_group`)
* `icetail.chunk-rows` - the number of rows in the chunk (for a group: of each chunk)

Before writing, the sink looks for this consumer's chunk id among the snapshots of the table's
current history (main branch ancestry, indexed once at open and kept up to date incrementally).
A chunk that is already there - the write succeeded but the offset commit did not - is skipped,
the pattern of Flink's Iceberg sink. The token is the id of the snapshot that holds the chunk.

The look-up is made on the metadata the sink holds: its own last commit (the table is reloaded
once per batch, and after any failure). The chunk's commit requires the branch head to be the
one that metadata shows, so it lands only if nothing was committed since the look-up; when
another writer did commit, the commit fails as a whole, and the sink reloads the table, looks
again and commits again (`iceberg_commit`: pyiceberg's own rebasing retry is off).

The table is created (with its namespace) when missing, from the rows' schema with every column
optional. When the source table's schema changes (a batch never spans a change), the sink table
follows it by field id before the first row of the new schema (`iceberg_evolution`): added
columns are added, renamed ones renamed, widened types widened, dropped ones kept (null in later
rows). Rows are then matched to the table's columns by name and cast to their types, and
columns the rows lack are written as nulls.

Data files are written by the Spark tasks that read the rows (`stager`), through pyiceberg's own
writer, under the table's data location and named `icetail-<chunk>-...`; the driver commits the
DataFile (statistics included) that the task's writer made of it, without reading the file
(`commit_staged`). A replayed chunk that is already committed has its new file deleted again.
A file staged by a run that stopped before committing it stays unreferenced: Iceberg's
orphan-file removal collects it. Partitioned sink tables are written from the driver
(pyiceberg's partitioned append).

The parts live by job: `iceberg_ledger` (which chunks the table holds), `iceberg_commit` (one
commit on the held metadata), `iceberg_schema` (the table's shape), `iceberg_stager` (the
Spark-task writer), `iceberg_errors` (retry or reject). `IcebergTarget` is what the changelog sink
shares with the Iceberg mirror (`iceberg/mirror`): the table, the ledger and the commit of a group
of chunks once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction

from icetail.catalogs import open_catalog
from icetail.kernel.errors import (
    CatalogNotFoundError,
    CatalogUnavailableError,
    ConfigError,
    IcetailError,
    SinkError,
    SinkRejectedError,
    error_text,
)
from icetail.kernel.names import check_consumer_id
from icetail.kernel.secrets import fileio_items
from icetail.sinks.base import ChunkKey
from icetail.sinks.iceberg.commit import commit_retries, committed, outraced
from icetail.sinks.iceberg.errors import REJECTED_ERRORS, TRANSIENT_ERRORS
from icetail.sinks.iceberg.evolution import evolve_by_field_id
from icetail.sinks.iceberg.ledger import ChunkLedger, chunk_summary
from icetail.sinks.iceberg.schema import conform, sink_schema
from icetail.sinks.iceberg.stager import IcebergStager, file_prefix, staged_file, staged_name

_T = TypeVar("_T")


class IcebergTarget:
    """An Iceberg table of a pyiceberg catalog that chunks are committed to, each chunk once: the table's
    loading, creation and reloading, the chunk ledger and the one-commit-per-group step (`_append_once`)
    shared by the changelog sink (`IcebergTableSink`) and the mirror (`iceberg_mirror.IcebergMirrorSink`)."""

    def __init__(self, catalog_name: str, identifier: str, *, consumer: str, schema: pa.Schema | None = None) -> None:
        if "." not in identifier.strip(".") or any(not part for part in identifier.split(".")):
            raise ConfigError(f"iceberg sink table {identifier!r} must be written as NAMESPACE.TABLE")
        self.catalog_name = catalog_name
        self.identifier = identifier
        self.consumer = check_consumer_id(consumer)  # in file names and the comma-separated chunk ids
        self._closed = False
        self._stale = False  # a step failed: the held metadata may be behind the catalog, reload it
        self._ledger = ChunkLedger(consumer)
        self.catalog = _open_catalog(catalog_name)
        self._table = self._load()
        if self._table is None and schema is not None:
            self._table = self._create(schema)
        if self._table is not None:
            self._ledger.index(self._table)

    @property
    def table(self) -> Table | None:
        """The sink table as last loaded (None until it exists)."""
        return self._table

    def _chunk_step(self, key: ChunkKey, outcome: str, step: Callable[[], str]) -> str:
        self._check_consumer(key)
        return self._guarded(f"chunk {key.name} not {outcome}", f"chunk {key.name} does not fit the table", step)

    def _check_consumer(self, key: ChunkKey) -> None:
        if key.consumer != self.consumer:
            raise ConfigError(f"iceberg sink opened for consumer {self.consumer!r} got a chunk of {key.consumer!r}")

    def _guarded(self, transient: str, rejected: str, step: Callable[[], _T]) -> _T:
        """Run `step` on the open sink, its errors mapped to SinkError (retry) or SinkRejectedError."""
        if self._closed:
            raise SinkRejectedError(f"iceberg sink {self._where()} is closed")
        try:
            return step()
        except BaseException as exc:
            self._stale = True  # whatever happened (a commit's outcome may be unknown), reload next time
            if isinstance(exc, IcetailError):
                raise
            if isinstance(exc, TRANSIENT_ERRORS):
                raise SinkError(f"iceberg sink {self._where()}: {transient}: {error_text(exc)}") from exc
            if isinstance(exc, REJECTED_ERRORS):
                raise SinkRejectedError(f"iceberg sink {self._where()}: {rejected}: {error_text(exc)}") from exc
            raise

    def close(self) -> None:
        """Release the catalog's connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        close = getattr(self.catalog, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()

    # -- steps -----------------------------------------------------------------------------------

    def _append_once(
        self,
        chunks: Sequence[tuple[str, int]],
        table: Table,
        appended: Callable[[Table, list[int]], tuple[Table, Callable[[Transaction], None]]],
        replayed: Callable[[int], None],
    ) -> list[str]:
        """Commit the `chunks` (name, rows) the table does not hold yet as one snapshot; their tokens.

        The ledger is read on the very metadata the commit is based on, and the commit lands only
        if the branch head has not moved since (`iceberg_commit`): a conflict means someone else
        committed, maybe these chunks, so the table is reloaded and the chunks looked up again. A
        chunk found in held metadata is looked up again in the table as committed now (the
        snapshot holding it may have been rolled back since): replays are rare, the reload cheap.
        A group is committed as one snapshot, so it is found whole or not at all; chunks found are
        skipped (`replayed`) and the others appended (`appended` gets their indexes).
        """
        retries = commit_retries(table)
        conflicts = 0
        reloaded = False
        while True:
            self._ledger.index(table)
            done = [self._ledger.get(name) for name, _ in chunks]
            if any(d is not None for d in done) and not reloaded:
                table, reloaded = self._reloaded(), True
                continue
            for i, found in enumerate(done):  # a replay with other rows is refused before anything is committed
                if found is not None:
                    self._check_replay(chunks[i], found)
            pending = [i for i, d in enumerate(done) if d is None]
            if not pending:
                break
            head = table.metadata.current_snapshot_id
            table, stage = appended(table, pending)
            if table.metadata.current_snapshot_id != head:
                # a schema commit conflicted and was redone on the table as committed now (another
                # writer's snapshots in it): the chunks are looked up again there before committing
                conflicts += 1
                if conflicts > retries:
                    raise CommitFailedException(outraced(conflicts, retries))
                reloaded = True
                continue
            try:
                table = committed(table, stage)
                break
            except CommitFailedException as exc:
                conflicts += 1
                if conflicts > retries:
                    raise CommitFailedException(outraced(conflicts, retries)) from exc
                table, reloaded = self._reloaded(), True
        tokens: list[str] = []
        snapshot_id = self._committed(table, [chunks[i] for i in pending]) if pending else None
        for i, found in enumerate(done):
            if found is None:
                tokens.append(str(snapshot_id))
                continue
            replayed(i)
            tokens.append(str(found[0]))
        return tokens

    def _check_replay(self, chunk: tuple[str, int], done: tuple[int, int | None]) -> None:
        (name, rows), (snapshot_id, stored_rows) = chunk, done
        if stored_rows is not None and stored_rows != rows:
            raise SinkRejectedError(
                f"iceberg sink {self._where()}: chunk {name} is already in snapshot {snapshot_id} with "
                f"{stored_rows} rows but was replayed with {rows}; chunk boundaries must not change"
            )

    def _committed(self, table: Table, chunks: Sequence[tuple[str, int]]) -> int:
        """The id of the snapshot that now holds `chunks`, found after our own append."""
        self._table = table
        snapshot_id = self._ledger.committed(table, chunks)
        if snapshot_id is None:
            names = ", ".join(name for name, _ in chunks)
            raise SinkError(f"iceberg sink {self._where()}: chunks {names} were appended but cannot be found")
        return snapshot_id

    def _held(self, schema: pa.Schema | None) -> Table:
        """The table as this sink last loaded or committed it; reloaded if a step failed since.

        A chunk's commit needs no fresher metadata: it fails if the table moved (`_append_once`).
        """
        if self._table is not None and not self._stale:
            return self._table
        return self._refreshed(schema)

    def _reloaded(self) -> Table:
        """The table as committed right now (it exists: the sink held it)."""
        try:
            self._table = self._table.refresh() if self._table is not None else self._load()
        except (NoSuchTableError, NoSuchNamespaceError) as exc:
            raise SinkRejectedError(f"iceberg sink table {self._where()} was dropped while in use") from exc
        if self._table is None:
            raise SinkRejectedError(f"iceberg sink table {self._where()} was dropped while in use")
        self._stale = False
        return self._table

    def _refreshed(self, schema: pa.Schema | None) -> Table:
        """The table as committed right now; created from `schema` if it does not exist yet.

        Without a schema (committing a staged file) the table must exist already.
        """
        if self._table is not None:
            return self._reloaded()
        table = self._load()
        if table is None:
            if schema is None:
                raise SinkRejectedError(f"iceberg sink table {self._where()} does not exist; nothing was staged for it")
            table = self._create(schema)
        self._table = table
        self._stale = False
        return table

    def _load(self) -> Table | None:
        try:
            return self.catalog.load_table(self.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except TRANSIENT_ERRORS as exc:
            raise SinkError(f"iceberg sink table {self._where()} cannot be loaded: {error_text(exc)}") from exc

    def _create(self, schema: pa.Schema) -> Table:
        namespace = tuple(self.identifier.split(".")[:-1])
        try:
            self.catalog.create_namespace_if_not_exists(namespace)
            return self.catalog.create_table_if_not_exists(
                self.identifier, schema=self._table_schema(schema), properties=self._table_properties()
            )
        except TRANSIENT_ERRORS as exc:
            raise SinkError(f"iceberg sink table {self._where()} cannot be created: {error_text(exc)}") from exc
        except REJECTED_ERRORS as exc:
            raise SinkRejectedError(
                f"iceberg sink table {self._where()} cannot be created from the change rows' schema: {error_text(exc)}"
            ) from exc

    def _table_schema(self, schema: pa.Schema) -> pa.Schema | Schema:
        """The schema a missing table is created with, for change rows of `schema`: all of them, optional."""
        return sink_schema(schema)

    def _table_properties(self) -> dict[str, str]:
        """The properties a missing table is created with."""
        return {}

    def _evolve(self, table: Table, schema: pa.Schema) -> Table:
        """Follow the source's schema changes by field id; commits nothing when nothing changes."""
        table = evolve_by_field_id(table, schema, self._where())
        self._table = table
        return table

    def _where(self) -> str:
        return f"{self.catalog_name}/{self.identifier}"


class IcebergTableSink(IcebergTarget):
    """Appends each chunk as one snapshot of `identifier` in catalog `catalog_name`."""

    exactly_once: bool = True

    def write(self, key: ChunkKey, rows: pa.Table) -> str:
        return self._chunk_step(key, "written", lambda: self._write(key, rows))

    def _write(self, key: ChunkKey, rows: pa.Table) -> str:
        summary = chunk_summary(self.consumer, [(key.name, rows.num_rows)])

        def appended(table: Table, pending: list[int]) -> tuple[Table, Callable[[Transaction], None]]:
            table = self._evolve(table, rows.schema)
            conformed = conform(rows, table.schema().as_arrow())
            return table, lambda transaction: transaction.append(conformed, snapshot_properties=summary)

        chunks = [(key.name, rows.num_rows)]
        return self._append_once(chunks, self._held(rows.schema), appended, replayed=lambda i: None)[0]

    def stager(self, schema: pa.Schema) -> IcebergStager | None:
        """What the Spark tasks need to write this batch's data files; None for a partitioned table.

        Creates or evolves the table for `schema` (the batch's change rows) first, on the driver,
        so every task writes against the same, final table schema.
        """
        table = self._guarded(
            "the table cannot be prepared", "the change rows do not fit the table", lambda: self._prepared(schema)
        )
        if not table.spec().is_unpartitioned():
            return None
        # the tasks need the layout (schema, location, properties), not the history
        layout = table.metadata.model_copy(
            update={"snapshots": [], "snapshot_log": [], "metadata_log": [], "refs": {}, "current_snapshot_id": None}
        )
        return IcebergStager(layout.model_dump_json(), fileio_items(table.io.properties.items()))

    def _prepared(self, schema: pa.Schema) -> Table:
        return self._evolve(self._refreshed(schema), schema)

    def commit_staged(self, key: ChunkKey, staged: str) -> str:
        """Append the data file a Spark task wrote for `key` as the chunk's snapshot (once)."""
        return self._chunk_step(key, "committed", lambda: self._commit_staged([(key, staged)])[0])

    def commit_staged_group(self, staged: Sequence[tuple[ChunkKey, str]]) -> list[str]:
        """Append the data files Spark tasks wrote for several chunks as one snapshot; each chunk once.

        One snapshot per group instead of one per chunk: fewer commits (each one a manifest, a
        manifest list, a metadata file and a catalog update) and a sink history that does not grow
        with the number of small source files. The chunks of the group that the table already holds
        (a replay) are skipped; the rest are appended together.
        """
        if not staged:
            return []
        for key, _ in staged:
            self._check_consumer(key)
        names = f"chunks {staged[0][0].name} to {staged[-1][0].name}"
        return self._guarded(
            f"{names} not committed", f"{names} do not fit the table", lambda: self._commit_staged(staged)
        )

    def _commit_staged(self, staged: Sequence[tuple[ChunkKey, str]]) -> list[str]:
        table = self._held(None)
        paths: list[str] = []
        data_files: list[DataFile] = []
        for key, token in staged:
            path, written = staged_file(token)
            if not staged_name(path).startswith(file_prefix(key)):
                raise SinkRejectedError(f"iceberg sink {self._where()}: staged file {path} is not chunk {key.name}")
            paths.append(path)
            data_files.append(written or parquet_file_to_data_file(table.io, table.metadata, path))
        chunks = [(key.name, int(f.record_count)) for (key, _), f in zip(staged, data_files, strict=True)]

        def appended(table: Table, pending: list[int]) -> tuple[Table, Callable[[Transaction], None]]:
            summary = chunk_summary(self.consumer, [chunks[i] for i in pending])

            def fast_append(transaction: Transaction) -> None:
                with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for i in pending:
                        append.append_data_file(data_files[i])

            return table, fast_append

        def replayed(i: int) -> None:  # a replay of a committed chunk: its new file is not needed
            with contextlib.suppress(OSError):
                table.io.delete(paths[i])

        return self._append_once(chunks, table, appended, replayed)


def _open_catalog(name: str) -> Catalog:
    """The sink's catalog, opened as the source's is; an unreachable one fails the sink stage (retried)."""
    try:
        return open_catalog(name)
    except CatalogUnavailableError as exc:
        raise SinkError(f"iceberg sink: {exc}") from exc
    except CatalogNotFoundError as exc:
        raise CatalogNotFoundError(f"iceberg sink: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"iceberg sink: {exc}") from exc
