"""A change plan cut into Spark input partitions (driver side) and one partition read (executor side).

Every partition is a frozen, picklable value carrying what an executor needs: the splits, the
ReadContext (file IO properties, output schema) and how to reconcile, so executors never
resolve a catalog. A snapshot that needs carry-over removal or update pairing (it both deletes
and inserts rows) is one partition, reconciled there as a whole by `reconcile_snapshot`, as
`icetail changes` does; the splits of other snapshots are packed into partitions by bytes.

With `verify` on, a snapshot some summary rule applies to is never cut across partitions either:
the task that reads it counts its raw DELETE/INSERT rows and checks them (reader/changes/checks.py).
A snapshot a stream's rate limit cut across micro-batches (`unchecked`) is not checked: no task
reads all of it. Such a cut reads a split between file rows (`windows`, spark_source/limits.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from icetail.kernel.errors import DataFileError, IcetailError
from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.verify import VerifyMode, report, rules_of_plan
from icetail.monitor.planning.planner import ChangePlan
from icetail.reader.changes.checks import SnapshotCheck, SnapshotRules, SnapshotVerifier
from icetail.reader.changes.net_rows import NetLineage, net_rows
from icetail.reader.changes.read_setup import has_row_lineage, identifier_names, read_context
from icetail.reader.changes.release import Pairing, gathered_snapshots, releases, snapshot_batches
from icetail.reader.split.context import ReadContext
from icetail.reader.split.metadata_columns import change_schema
from icetail.reader.split.read import Chunk, read_split
from icetail.reader.split.row_lineage import with_lineage_fields

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
    windows: tuple[tuple[str, int, int | None], ...] = ()  # (split id, first file row, end row or None) of cut splits

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
    row_filter: str | None = None,
    windows: Mapping[str, tuple[int, int | None]] | None = None,
    unchecked: Set[int] = frozenset(),
) -> list[ChangePartitionSpec]:
    """The partitions of `plan`, in plan order; rows are projected onto `schema_id` (default: the plan's).

    `net`: one partition, the whole range, since net changes need every row of the range in one place.
    `verify`: a snapshot with summary rules is kept in one partition, which checks it.
    `windows`: the file rows read of the splits a rate limit cut; `unchecked`: the snapshots it cut.
    """
    if not plan.splits:
        return []
    output_schema_id = plan.schema_id if schema_id is None else schema_id
    context = read_context(table, output_schema_id, plan.tasks, with_schema_id=with_schema_id, row_filter=row_filter)
    identifiers = identifier_names(table, output_schema_id, identifier_columns)
    rules: dict[int, SnapshotRules] = {}
    if verify != VerifyMode.OFF:
        start = plan.from_snapshot_id_exclusive
        checkable = rules_of_plan(table.metadata, plan.splits, from_snapshot_exclusive=start, collapsed=plan.collapsed)
        rules = {snapshot_id: r for snapshot_id, r in checkable.items() if r.rules and snapshot_id not in unchecked}
    cuts = windows or {}
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
    gather = gathered_snapshots(
        plan.tasks, carry_over_removal=carry_over_removal, identifiers=identifiers, lineage_pairing=lineage_pairing
    )

    def spec(splits: list[ChangeSplit], reconcile: bool) -> ChangePartitionSpec:
        snapshots = dict.fromkeys(s.task.commit.snapshot_id for s in splits)
        checks = tuple(rules[s] for s in snapshots if s in rules)
        cut = tuple((s.split_id, *cuts[s.split_id]) for s in splits if s.split_id in cuts)
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
            windows=cut,
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

    The rows leave in the units of reader/changes/release.py: under verify strict the rows of a checked
    snapshot are held until its check passed, so a refused snapshot yields nothing (the task
    fails with the SnapshotCheckError, the query with it).
    """
    verifier = SnapshotVerifier(spec.checks, spec.splits) if spec.verify != VerifyMode.OFF else None
    cut = {split_id: (low, high) for split_id, low, high in spec.windows}
    chunks = (
        chunk
        for split in spec.splits
        for chunk in _split_chunks(spec.context, split, spec.reads_lineage, cut.get(split.split_id, (0, None)))
    )
    if spec.net:
        yield from _net_batches(spec, chunks, verifier)
        return
    snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in spec.splits}
    gathered = {spec.splits[0].task.commit.snapshot_id} if spec.reconcile else set()
    pairing = Pairing(
        spec.arrow_schema,
        spec.identifier_columns,
        spec.carry_over_removal,
        spec.lineage_pairing,
        spec.with_row_lineage,
    )
    strict = spec.verify == VerifyMode.STRICT
    checked = _reporter(spec.verify)
    for release in releases(chunks, snapshot_of, gathered, verifier, strict=strict, on_check=checked):
        batches = pairing.reconciled(release.batches).to_batches() if release.reconcile else release.batches
        yield from (batch for batch in batches if batch.num_rows)


def _reporter(mode: VerifyMode) -> Callable[[SnapshotCheck], None]:
    """Under warn a mismatch is logged (by the Python worker: the executor's log); under strict it raises."""

    def checked(check: SnapshotCheck) -> None:
        report(check, mode, setting=VERIFY_SETTING)

    return checked


def _net_batches(
    spec: ChangePartitionSpec, chunks: Iterator[Chunk], verifier: SnapshotVerifier | None
) -> Iterator[pa.RecordBatch]:
    """The net changes of the range in `spec` (reader/changes/net.py); every snapshot is checked as it is read."""
    lineage = NetLineage(keyed=spec.lineage_pairing, output=spec.with_row_lineage)
    snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in spec.splits}
    released = releases(chunks, snapshot_of, set(), verifier, on_check=_reporter(spec.verify))
    tasks = (s.task for s in spec.splits)
    result = net_rows(lineage, spec.arrow_schema, snapshot_batches(released), tasks, spec.identifier_columns)
    yield from (batch for batch in result.to_batches() if batch.num_rows)


def _split_chunks(
    context: ReadContext, split: ChangeSplit, with_row_lineage: bool, window: tuple[int, int | None]
) -> Iterator[Chunk]:
    """The chunks of one split (file rows in `window`); an unreadable file is a DataFileError naming it."""
    low, high = window
    try:
        yield from read_split(
            context, split, with_row_lineage=with_row_lineage, start_row_inclusive=low, end_row_exclusive=high
        )
    except IcetailError:
        raise
    except (OSError, pa.ArrowException) as exc:
        path = split.task.data_file.path
        raise DataFileError(f"data file {path} cannot be read ({exc}); restore the file or skip its snapshot") from exc
