"""The `icetail` data source on Spark 4's Python Data Source API (pyspark.sql.datasource).

Planning runs driver-side (in the Python workers Spark starts for `schema()`, `partitions()`
and the stream's offsets): it loads the table through pyiceberg's catalog configuration and
cuts the range into `ChangePartition`s. `read()` runs in executors on what the partition carries
(file IO properties, splits), never on the catalog. Import this module through `icetail.spark`,
which refuses Spark 3.5 with one line first.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from icetail.kernel.errors import BranchDroppedError, RefNotFoundError
from icetail.monitor.engine.api import plan_range
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.range_bounds import RangeBounds
from icetail.monitor.engine.spark_source.limits import Window, cut_plan, limited_end
from icetail.monitor.engine.spark_source.offsets import StreamOffset, initial_offset, next_offset
from icetail.monitor.engine.spark_source.options import (
    BatchOptions,
    StreamOptions,
    TableOptions,
    parse_any_options,
    parse_batch_options,
    parse_stream_options,
)
from icetail.monitor.engine.spark_source.partitions import ChangePartitionSpec, plan_partitions, read_partition
from icetail.monitor.planning.lineage import snapshot_as_of, snapshot_or_raise
from icetail.monitor.planning.planner import ChangePlan, Planner
from icetail.monitor.planning.refs import table_on_branch, tag_snapshot
from icetail.reader.changes.read_setup import change_arrow_schema, check_row_lineage, output_schema, schema_id_of
from icetail.reader.split.row_filter import checked_row_filter

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles, ReadMaxRows
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as AvailableNowBase

    ADMISSION_CONTROL = True
except ImportError:  # Spark 4.0/4.1: max-snapshots-per-trigger is applied by the reader alone
    ADMISSION_CONTROL = False

    class AvailableNowBase:  # type: ignore[no-redef]
        """Spark 4.0/4.1 have no AvailableNow interface for Python sources (Spark wraps them)."""


class ChangePartition(InputPartition):
    """One Spark task's share of a range (a picklable `ChangePartitionSpec`)."""

    def __init__(self, spec: ChangePartitionSpec) -> None:
        super().__init__(spec)
        self.spec = spec


def _open_table(options: TableOptions, *, following: bool = False) -> Table:
    """The table as seen from the `branch` option (main by default).

    `following`: a stream that already started on the branch; a branch gone by then was dropped
    under it (BranchDroppedError) rather than misspelt.
    """
    table = load_table(open_catalog(options.catalog, dict(options.catalog_properties)), options.table)
    try:
        return table_on_branch(table, options.branch)
    except RefNotFoundError as exc:
        if not following:
            raise
        raise BranchDroppedError(
            f"branch {options.branch!r} of table {options.table} no longer exists (dropped, or published and "
            f"removed); this query's checkpoint cannot continue it: recreate the branch, or start a new query "
            "(new checkpointLocation) on another branch with option 'starting'"
        ) from exc


def _spark_schema(table: Table, schema_id: int | None, source: TableOptions) -> StructType:
    check_row_lineage(table, source.with_row_lineage)
    arrow = change_arrow_schema(
        table, schema_id, with_schema_id=source.with_schema_id, with_row_lineage=source.with_row_lineage
    )
    return from_arrow_schema(arrow, prefer_timestamp_ntz=True)


def _read(partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a partition, cast to the Arrow types Spark expects for `schema`."""
    if not isinstance(partition, ChangePartition):  # Spark's placeholder for an empty range
        return
    convert: Any = to_arrow_schema  # its `timezone` argument is Spark 4's (mypy runs against 3.5)
    target = convert(schema, timezone="UTC")
    for batch in read_partition(partition.spec):
        yield pa.Table.from_batches([batch]).cast(target).combine_chunks().to_batches()[0]


class ChangesDataSource(DataSource):
    """`spark.read.format("icetail")` / `spark.readStream.format("icetail")`: a table's change rows.

    `schema()` pins what the DataFrame reads (batch: the to-snapshot, current if omitted; stream:
    the current schema) on the instance, which Spark pickles on to `reader()`/`streamReader()`.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self._pinned: tuple[int | None, int | None] | None = None  # (to-snapshot, schema id)

    @classmethod
    def name(cls) -> str:
        return "icetail"

    def schema(self) -> StructType:
        table, _, schema_id = self._pin()
        return _spark_schema(table, schema_id, parse_any_options(self.options).source)

    def _pin(self) -> tuple[Table, int | None, int | None]:
        pin = parse_any_options(self.options)
        source, to_option = pin.source, pin.to_snapshot_id_inclusive
        table = _open_table(source)
        if pin.to_tag is not None:
            to_option = tag_snapshot(table.metadata, pin.to_tag, "option 'to-tag'", source.table)
        if pin.to_snapshot_id_exclusive is not None:  # Spark's endingVersion, endingBoundInclusive=false
            ending = snapshot_or_raise(table.metadata, pin.to_snapshot_id_exclusive, "endingVersion")
            to_option = ending.parent_snapshot_id
            if to_option is None:  # ends before the first snapshot: nothing to read
                self._pinned = (None, table.metadata.current_schema_id)
                return table, None, table.metadata.current_schema_id
        if to_option is not None:
            snapshot_or_raise(table.metadata, to_option, "to-snapshot")  # fail at load(), not at the first action
        to_snapshot = to_option if to_option is not None else table.metadata.current_snapshot_id
        if pin.to_timestamp_inclusive_ms is not None:  # the newest snapshot committed at or before it
            found = snapshot_as_of(table.metadata, pin.to_timestamp_inclusive_ms)
            to_snapshot = found.snapshot_id if found is not None else None  # None: before the first, no rows
        schema_id = schema_id_of(table, to_snapshot)
        checked_row_filter(source.row_filter, output_schema(table, schema_id), source.table, "option 'filter'")
        self._pinned = (to_snapshot, schema_id)
        return table, to_snapshot, schema_id

    def _pinned_values(self) -> tuple[int | None, int | None]:
        if self._pinned is None:  # a user-given schema skipped schema()
            self._pin()
        assert self._pinned is not None
        return self._pinned

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_batch_options(self.options)
        to_snapshot, schema_id = self._pinned_values()
        return ChangesBatchReader(options, to_snapshot, schema_id, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_stream_options(self.options)
        _, schema_id = self._pinned_values()
        return ChangesStreamReader(options, schema_id, schema)


class ChangesBatchReader(DataSourceReader):
    """(from-snapshot, to-snapshot] as `icetail changes` reads it."""

    def __init__(self, options: BatchOptions, to_snapshot: int | None, schema_id: int | None, schema: StructType):
        self._options = options
        self._to_snapshot = to_snapshot  # pinned by schema(): the option, else the current snapshot then
        self._schema_id = schema_id
        self._schema = schema

    def partitions(self) -> list[InputPartition]:
        table = _open_table(self._options.source)
        if self._to_snapshot is None:  # an empty table
            return []
        options = self._options
        from_exclusive = options.from_snapshot_id_exclusive
        if options.from_snapshot_id_inclusive is not None:  # Spark's startingVersion: starts with its changes
            starting = snapshot_or_raise(table.metadata, options.from_snapshot_id_inclusive, "startingVersion")
            from_exclusive = starting.parent_snapshot_id  # None for the first: before everything
        bounds = RangeBounds(
            from_exclusive,
            self._to_snapshot,
            from_timestamp_inclusive=options.from_timestamp_inclusive_ms,
            from_timestamp_exclusive=options.from_timestamp_exclusive_ms,
            branch=options.source.branch,
            from_tag=options.from_tag,
        )
        plan = plan_range(table, bounds, row_filter=options.source.row_filter)
        return _partitions(
            table,
            plan,
            self._schema_id,
            options.source,
            net=options.net,
            carry_over_removal=options.carry_over_removal,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self._schema)


class ChangesStreamReader(DataSourceStreamReader, AvailableNowBase):
    """Micro-batch (start, end] reads the changes of the snapshots after `start` up to `end`.

    Offsets are `StreamOffset` JSON; Spark's checkpoint holds them, this object only caches.
    Rows are projected onto the schema pinned at `load()` (the stream's schema cannot change).
    """

    def __init__(self, options: StreamOptions, schema_id: int | None, schema: StructType) -> None:
        self._options = options
        self._schema_id = schema_id
        self._schema = schema
        self._planner: Planner | None = None
        self._available_now_target: int | None = None  # Trigger.AvailableNow: no snapshot after it
        # Spark < 4.2 gives latestOffset() no start: the end of the last non-empty batch planned in
        # this run. Not the checkpoint's last batch, which a restart replays as an empty range before
        # Spark's AvailableNow wrapper asks for its target (which must be everything available).
        self._last_end: StreamOffset | None = None

    def _table(self, *, following: bool = True) -> Table:
        table = _open_table(self._options.source, following=following)
        if self._planner is None:
            self._planner = Planner(
                table, branch=self._options.source.branch, row_filter=self._options.source.row_filter
            )
        else:
            self._planner.refresh(table)
        return table

    def initialOffset(self) -> dict[str, Any]:
        return initial_offset(self._table(following=False).metadata, self._options.starting).to_json()

    def getDefaultReadLimit(self) -> Any:
        """The limits as Spark's admission control knows them (one ReadLimit: Python sources get no composite).

        Spark hands the default back to `latestOffset()` unless it asks for everything
        (ReadAllAvailable, e.g. Trigger.Once): then no option limits the batch. So the one shown is
        the first of rows, bytes, files and snapshots (as ReadMaxFiles(N snapshots)), and every
        option given applies.
        """
        limits = self._options.limits
        if limits.max_rows is not None:
            return ReadMaxRows(limits.max_rows)
        if limits.max_bytes is not None:
            return ReadMaxBytes(limits.max_bytes)
        limit = limits.max_files if limits.max_files is not None else self._options.max_snapshots_per_trigger
        return ReadMaxFiles(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self._table().metadata.current_snapshot_id

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        table = self._table()
        if start is None:  # Spark 4.0/4.1: no start, no limit from Spark
            return self._latest_without_start(table).to_json()
        # Spark asks for everything (ReadAllAvailable, e.g. Trigger.Once): the options do not apply
        limited = not (ADMISSION_CONTROL and isinstance(limit, ReadAllAvailable))
        return self._end(table, StreamOffset.from_json(start), limited=limited).to_json()

    def _end(self, table: Table, start: StreamOffset, *, limited: bool) -> StreamOffset:
        """The end of the batch from `start`: up to the current snapshot (or AvailableNow's target), limited."""
        end = next_offset(
            table.metadata,
            start,
            max_snapshots=self._options.max_snapshots_per_trigger if limited else None,
            until_snapshot_id_inclusive=self._available_now_target,
        )
        if not limited or not self._options.limits.any or end == start:
            return end
        assert self._planner is not None
        limits, source = self._options.limits, self._options.source
        return limited_end(self._planner, table, start, end, limits, source, self._schema_id)

    def _latest_without_start(self, table: Table) -> StreamOffset:
        """Without Spark's start: from the last batch planned in this run, else everything from the initial offset."""
        if self._last_end is not None:
            return self._end(table, self._last_end, limited=True)
        return next_offset(table.metadata, initial_offset(table.metadata, self._options.starting))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        same = begin.snapshot_id == finish.snapshot_id and begin.position == finish.position
        if same or finish.plan_end is None:
            return []
        self._last_end = finish
        table = self._table()
        assert self._planner is not None
        plan = self._planner.plan(begin.snapshot_id, finish.plan_end, ordinal_base=begin.next_ordinal)
        plan, windows, cut = cut_plan(plan, begin, finish)
        return _partitions(table, plan, self._schema_id, self._options.source, windows=windows, unchecked=cut)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self._schema)


def _partitions(
    table: Table,
    plan: ChangePlan,
    schema_id: int | None,
    source: TableOptions,
    *,
    net: bool = False,
    carry_over_removal: bool = True,
    windows: dict[str, Window] | None = None,
    unchecked: set[int] | None = None,
) -> list[InputPartition]:
    """The plan's input partitions, read with the table options of the batch or stream reader."""
    specs = plan_partitions(
        table,
        plan,
        schema_id=schema_id,
        identifier_columns=source.identifier_columns,
        carry_over_removal=carry_over_removal,
        net=net,
        with_schema_id=source.with_schema_id,
        with_row_lineage=source.with_row_lineage,
        verify=source.verify,
        row_filter=source.row_filter,
        windows=windows,
        unchecked=unchecked or set(),
    )
    return [ChangePartition(spec) for spec in specs]


__all__ = ["ADMISSION_CONTROL", "ChangePartition", "ChangesBatchReader", "ChangesDataSource", "ChangesStreamReader"]
