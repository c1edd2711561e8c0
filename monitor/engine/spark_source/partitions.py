"""A change plan cut into Spark input partitions (driver side) and one partition read (executor side).

Every partition is a frozen, picklable value carrying what an executor needs: the splits, the
ReadContext (file IO properties, output schema) and how to reconcile, so executors never
resolve a catalog. A snapshot that needs carry-over removal or update pairing (it both deletes
and inserts rows) is one partition, reconciled there as a whole by `reconcile_snapshot`, as
`icetail changes` does; the splits of other snapshots are packed into partitions by bytes.

With `verify` on, a snapshot some summary rule applies to is never cut across partitions either:
the task that reads it counts its raw DELETE/INSERT rows and checks them (engine/verify.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.errors import DataFileError, IcetailError
from icetail.kernel.model import ChangeSplit, ChangeType
from icetail.monitor.engine.api import (
    NetLineage,
    has_row_lineage,
    identifier_names,
    net_rows,
    read_context,
    snapshots_needing_reconcile,
    without_lineage,
)
from icetail.monitor.engine.verify import SnapshotRules, VerifyMode, report, rules_of_plan
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.context import ReadContext
from icetail.reader.metadata_columns import change_schema
from icetail.reader.reconcile import reconcile_snapshot
from icetail.reader.row_lineage import with_lineage_fields
from icetail.reader.split_reader import Chunk, read_split

DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024  # estimated parquet bytes of packed (unreconciled) splits
MAX_SPLITS_PER_PARTITION = 64
VERIFY_SETTING = "option 'verify'"  # how a strict refusal names the setting to change


@dataclass(frozen=True)
class ChangePartitionSpec:
    """Splits read by one Spark task; `reconcile`: they are all of one snapshot, reconciled together."""

    context: ReadContext
    splits: tuple[ChangeSplit, ...]
    reconcile: bool
    identifier_columns: tuple[str, ...]
    carry_over_removal: bool = True
    lineage_pairing: bool = False  # a v3 table: updates pair by _row_id first
    with_row_lineage: bool = False  # the rows keep `_row_id` and `_last_updated_sequence_number`
    net: bool = False  # the partition is the whole range, folded into its net changes
    verify: VerifyMode = VerifyMode.OFF
    checks: tuple[SnapshotRules, ...] = ()  # snapshots whose every split is in this partition, to check

    @property
    def reads_lineage(self) -> bool:
        return self.with_row_lineage or (self.reconcile and self.lineage_pairing)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The rows as read (with the lineage columns when they are read, for output or for pairing)."""
        data = self.context.output_arrow_schema
        with_lineage = with_lineage_fields(data) if self.reads_lineage else data
        return change_schema(with_lineage, with_schema_id=self.context.with_schema_id)


def plan_partitions(
    table: Table,
    plan: ChangePlan,
    *,
    schema_id: int | None = None,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
    net: bool = False,
    with_schema_id: bool = False,
    with_row_lineage: bool = False,
    verify: VerifyMode = VerifyMode.OFF,
) -> list[ChangePartitionSpec]:
    """The partitions of `plan`, in plan order; rows are projected onto `schema_id` (default: the plan's).

    `net`: one partition, the whole range, since net changes need every row of the range in one place.
    `verify`: a snapshot with summary rules is kept in one partition, which checks it.
    """
    if not plan.splits:
        return []
    output_schema_id = plan.schema_id if schema_id is None else schema_id
    context = read_context(table, output_schema_id, plan.tasks, with_schema_id=with_schema_id)
    identifiers = identifier_names(table, output_schema_id, identifier_columns)
    rules: dict[int, SnapshotRules] = {}
    if verify != VerifyMode.OFF:
        start = plan.from_snapshot_id_exclusive
        rules = rules_of_plan(table.metadata, plan.splits, from_snapshot_exclusive=start, collapsed=plan.collapsed)
    lineage_pairing = has_row_lineage(table)
    if net:  # on a v3 table every split reads `_row_id`: net rows are keyed by it
        checks = tuple(rules.values())
        return [
            ChangePartitionSpec(
                context,
                plan.splits,
                True,
                identifiers,
                True,
                lineage_pairing,
                with_row_lineage,
                net=True,
                verify=verify,
                checks=checks,
            )
        ]
    reconciling = carry_over_removal or bool(identifiers) or lineage_pairing
    gather = snapshots_needing_reconcile(plan.tasks) if reconciling else set()

    def spec(splits: list[ChangeSplit], reconcile: bool) -> ChangePartitionSpec:
        snapshots = dict.fromkeys(s.task.commit.snapshot_id for s in splits)
        checks = tuple(rules[s] for s in snapshots if s in rules)
        return ChangePartitionSpec(
            context,
            tuple(splits),
            reconcile,
            identifiers,
            carry_over_removal,
            lineage_pairing,
            with_row_lineage,
            verify=verify,
            checks=checks,
        )

    partitions: list[ChangePartitionSpec] = []
    packed: list[ChangeSplit] = []
    packed_bytes = 0
    whole: list[ChangeSplit] = []  # the splits of the snapshot being gathered
    for split in plan.splits:
        snapshot_id = split.task.commit.snapshot_id
        if whole and whole[0].task.commit.snapshot_id != snapshot_id:
            partitions.append(spec(whole, True))
            whole = []
        if snapshot_id in gather:
            if packed:
                partitions.append(spec(packed, False))
                packed, packed_bytes = [], 0
            whole.append(split)
            continue
        size = max(split.estimated_bytes, 1)
        full = len(packed) >= MAX_SPLITS_PER_PARTITION or packed_bytes + size > partition_bytes
        checked_continues = snapshot_id in rules and bool(packed) and packed[-1].task.commit.snapshot_id == snapshot_id
        if packed and full and not checked_continues:  # a checked snapshot is never cut
            partitions.append(spec(packed, False))
            packed, packed_bytes = [], 0
        packed.append(split)
        packed_bytes += size
    if whole:
        partitions.append(spec(whole, True))
    if packed:
        partitions.append(spec(packed, False))
    return partitions


def read_partition(spec: ChangePartitionSpec) -> Iterator[pa.RecordBatch]:
    """The change rows of one partition (runs in a Spark task); no empty batches.

    Under verify strict the rows of a checked snapshot are held until its check passed, so a
    refused snapshot yields nothing (the task fails with the SnapshotCheckError).
    """
    checker = _PartitionChecker(spec)
    if spec.net:
        yield from _net_batches(spec, checker)
        return
    lineage = spec.reads_lineage
    if not spec.reconcile:
        held: list[pa.RecordBatch] = []
        for split in spec.splits:
            hold = checker.holds(split)
            for batch in _split_batches(spec.context, split, lineage, checker):
                if hold:
                    held.append(batch)
                else:
                    yield batch
            if hold and checker.passed(split):
                yield from held
                held = []
        return
    batches = [batch for split in spec.splits for batch in _split_batches(spec.context, split, lineage, checker)]
    changes = pa.Table.from_batches(batches, schema=spec.arrow_schema)
    reconciled = reconcile_snapshot(
        changes, spec.identifier_columns or None, spec.carry_over_removal, row_lineage=spec.lineage_pairing
    )
    if not spec.with_row_lineage:
        reconciled = without_lineage(reconciled)
    yield from (batch for batch in reconciled.to_batches() if batch.num_rows)


def _net_batches(spec: ChangePartitionSpec, checker: _PartitionChecker) -> Iterator[pa.RecordBatch]:
    """The net changes of the range in `spec` (reader/net.py)."""
    lineage = NetLineage(keyed=spec.lineage_pairing, output=spec.with_row_lineage)
    batches = (
        (s.task.commit.snapshot_id, b)
        for s in spec.splits
        for b in _split_batches(spec.context, s, lineage.reads, checker)
    )
    result = net_rows(lineage, spec.arrow_schema, batches, (s.task for s in spec.splits), spec.identifier_columns)
    yield from (batch for batch in result.to_batches() if batch.num_rows)


class _PartitionChecker:
    """Counts the raw DELETE/INSERT rows of the partition's checked snapshots; checks each once its splits are read.

    Every split of a checked snapshot is in this partition (`plan_partitions`), so its last
    split read completes its counts. Under warn a mismatch is logged (by the Python worker: the
    executor's log); under strict it raises SnapshotCheckError, failing the task and the query.
    """

    def __init__(self, spec: ChangePartitionSpec) -> None:
        self._mode = spec.verify
        self._rules = {r.snapshot_id: r for r in spec.checks} if spec.verify != VerifyMode.OFF else {}
        self._pending: dict[int, int] = {}
        for split in spec.splits:
            snapshot_id = split.task.commit.snapshot_id
            if snapshot_id in self._rules:
                self._pending[snapshot_id] = self._pending.get(snapshot_id, 0) + 1
        self._counts: dict[int, list[int]] = {s: [0, 0] for s in self._rules}

    def holds(self, split: ChangeSplit) -> bool:
        """Whether the split's rows wait for its snapshot's check (strict, and the snapshot is checked)."""
        return self._mode == VerifyMode.STRICT and split.task.commit.snapshot_id in self._rules

    def passed(self, split: ChangeSplit) -> bool:
        """Whether the split's snapshot has been checked (it passed: a failure raised)."""
        return self._pending.get(split.task.commit.snapshot_id) == 0

    def add(self, split: ChangeSplit, chunk: Chunk) -> None:
        snapshot_id = split.task.commit.snapshot_id
        counts = self._counts.get(snapshot_id)
        if counts is None:
            return
        for change_type, count in chunk.change_counts:
            if change_type == ChangeType.DELETE.value:
                counts[0] += count
            elif change_type == ChangeType.INSERT.value:
                counts[1] += count
        if not chunk.done:
            return
        self._pending[snapshot_id] -= 1
        if self._pending[snapshot_id] == 0:
            report(self._rules[snapshot_id].check(counts[0], counts[1]), self._mode, setting=VERIFY_SETTING)


def _split_batches(
    context: ReadContext, split: ChangeSplit, with_row_lineage: bool, checker: _PartitionChecker
) -> Iterator[pa.RecordBatch]:
    try:
        for chunk in read_split(context, split, with_row_lineage=with_row_lineage):
            checker.add(split, chunk)
            if chunk.batch is not None and chunk.batch.num_rows:
                yield chunk.batch
    except IcetailError:
        raise
    except (OSError, pa.ArrowException) as exc:
        path = split.task.data_file.path
        raise DataFileError(f"data file {path} cannot be read ({exc}); restore the file or skip its snapshot") from exc
