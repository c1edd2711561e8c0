"""The pipeline: plan -> write ahead -> read -> sink -> commit offset -> advance cursor.

Exactly-once rests on an order that makes every crash harmless:
1. the batch (range and ordered splits) is written ahead to the state before any row is read,
   so a restart finishes the same batch even if the table moved on;
2. each chunk is written to the sink first (idempotent per chunk key) and its row offset
   committed to the state second; a crash in between replays the same chunk onto the same key
   (an Iceberg sink commits staged chunks in groups, each chunk still keyed: commit_group.py);
3. the cursor advances only when every split of the batch is done.
Snapshots that need carry-over removal or update pairing are reconciled as a whole and
delivered as one chunk anchored at their first split (see docs/delivery.md).
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icetail.kernel import seams
from icetail.kernel.errors import BranchDroppedError, ConfigError, RefNotFoundError
from icetail.kernel.model import ChangeSplit
from icetail.kernel.processes import host_name, lease_holder_is_dead
from icetail.monitor.engine.api import (
    NetLineage,
    change_arrow_schema,
    check_row_lineage,
    has_row_lineage,
    identifier_names,
    net_rows,
    read_context,
    schema_id_of,
)
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.commit_group import ChunkGroup, coalesced
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.hints import reset_command
from icetail.monitor.engine.mirror_key import keyed_by_row_id, mirror_key
from icetail.monitor.engine.partitioned import (
    PartitionDelivery,
    PartitionedSnapshot,
    deliver_partitioned,
    net_partitioned,
    net_spec,
    partition_spec,
    partitioned_snapshots,
    segments_in_order,
)
from icetail.monitor.engine.release import (
    Pairing,
    Release,
    gathered_snapshots,
    observed,
    releases,
    snapshot_batches,
)
from icetail.monitor.engine.start_mode import StartMode, parse_start
from icetail.monitor.engine.startup import DIFF, CursorProblem, cursor_problem, initial_cursor, recovery_for
from icetail.monitor.engine.verify import (
    SnapshotCheck,
    SnapshotVerifier,
    VerifyMode,
    parse_verify_mode,
    report,
    verifier_for,
)
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import ChangePlan, Planner, same_schema_prefix
from icetail.monitor.planning.refs import table_on_branch
from icetail.reader.metadata_columns import CHANGE_TYPE
from icetail.reader.net_shuffle import NetFoldNotExact
from icetail.reader.reconcile import HIDDEN_PREFIX
from icetail.reader.spark import (
    BackgroundSession,
    SplitRequest,
    current_scheduler_pool,
    is_connect,
    run_splits,
    use_scheduler_pool,
)
from icetail.reader.split_reader import Chunk
from icetail.sinks.base import ChunkKey, GroupCommitSink, Sink, SplitSlot, StagingSink
from icetail.sinks.debezium import EnvelopeSink
from icetail.sinks.keyed import GroupWriteSink, KeyedSink, SparkTaskSink
from icetail.state.checkpoint import (
    BatchShape,
    Checkpoint,
    ChunkCommit,
    Cursor,
    Inflight,
    InflightBatch,
    SplitProgress,
)
from icetail.state.store import CheckpointStore, open_store

SPLIT_INDEX_COLUMN = HIDDEN_PREFIX + "split_index"
log = logging.getLogger("icetail.pipeline")


@dataclass(frozen=True)
class BatchOutcome:
    """What one batch did; `completed` is False when a stop request interrupted it."""

    batch_id: str
    from_snapshot_exclusive: int | None
    to_snapshot_inclusive: int
    snapshots: int
    rows_by_change_type: dict[str, int] = field(default_factory=dict)
    splits: int = 0
    chunks: int = 0
    data_files: int = 0
    delete_files: int = 0
    bytes_read: int = 0
    row_groups: int = 0
    rows_decoded: int = 0
    deleted_rows: int = 0
    planning_seconds: float = 0.0
    batch_seconds: float = 0.0
    resumed: bool = False
    completed: bool = True
    collapsed: bool = False  # a repair batch: the net change (from, to] by a direct diff, history collapsed
    snapshots_checked: int = 0  # snapshots whose summary proved at least one rule (--verify)
    check_mismatches: int = 0  # rules those snapshots failed (delivered anyway: --verify warn)
    schema_id: int | None = None  # the table schema the batch's rows are projected onto (one per batch)
    sink_duplicate_keys: int = 0  # inserts of a key the mirror's target held already, counted since the last outcome

    @property
    def rows(self) -> int:
        return sum(self.rows_by_change_type.values())


class _Tally:
    """Mutable counters of one batch, frozen into a BatchOutcome at the end."""

    def __init__(self) -> None:
        self.rows: Counter[str] = Counter()
        self.chunks = 0
        self.bytes_read = 0
        self.row_groups = 0
        self.rows_decoded = 0
        self.deleted_rows = 0
        self.snapshots_checked = 0
        self.check_mismatches = 0

    def add_chunk(self, chunk: Chunk) -> None:
        self.bytes_read += chunk.bytes_read
        self.row_groups += chunk.row_groups_read
        self.rows_decoded += chunk.rows_decoded
        self.deleted_rows += chunk.deleted_rows

    def add_rows(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            self.add_counts(())
            return
        self.add_counts(
            tuple((str(c["values"]), int(c["counts"])) for c in pc.value_counts(rows.column(CHANGE_TYPE)).to_pylist())
        )

    def add_counts(self, counts: tuple[tuple[str, int], ...]) -> None:
        self.chunks += 1
        for change_type, count in counts:
            self.rows[change_type] += count


class Pipeline:
    """Follows one table for one consumer; `run_batch` delivers one batch exactly once."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        store: CheckpointStore | None = None,
        sink: Sink | None = None,
        spark: Any = None,
        stop_event: threading.Event | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
        on_chunk: Callable[[Chunk], None] | None = None,
        on_check: Callable[[SnapshotCheck], None] | None = None,
        share_manifest_cache: bool = False,
    ) -> None:
        self.config = config
        # serve's pipelines plan from one process-wide manifest cache (its bound is the process's)
        self._share_manifest_cache = share_manifest_cache
        self.consumer = config.consumer_id
        self._owns_store = store is None
        self._store: CheckpointStore = store or open_store(config.state_url, history_limit=config.history_retention)
        self._sink = sink
        self._sink_duplicates_seen = 0  # the sink's `duplicates` as last reported in a BatchOutcome
        self._spark = spark  # a SparkSession, a BackgroundSession still starting, or None: our own
        self._own_session: BackgroundSession | None = None
        self._stop = stop_event or threading.Event()
        self._on_batch = on_batch
        self._on_chunk = on_chunk
        self._on_check = on_check
        self._verify = parse_verify_mode(config.verify)
        self._owner = f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._planner: Planner | None = None
        self._lease_renewed_at = 0.0
        self._full_next = False
        self._created = False  # this run created the consumer and has not begun a batch yet
        self._sink_key: tuple[str, ...] | None = None  # a mirror's key (KeyedSink), bound at open
        # opened once and reused: opening a catalog costs more than loading a table (a SQL catalog:
        # ~12 ms of CPU for its engine and schema check against ~1 ms), paid every poll of every table (R33)
        self._catalog: Catalog | None = None

    # lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # leaving on an error or a stop (SIGTERM, Ctrl-C): a JVM still starting is given up, not
        # waited for (it can take tens of seconds under load, past a supervisor's grace period)
        self.close(abandon_session=exc_type is not None)

    def open(self) -> None:
        """Check the sink and the consumer, then take the consumer's lease.

        A second run of the same consumer refuses (StateBusyError); a lease left by a run on
        this host whose process is gone (a crash) is taken over at once instead of waiting for
        it to expire.
        """
        if self._sink is None:
            from icetail.sinks.factory import parse_sink_url

            parse_sink_url(self.config.sink_url)  # a bad sink URL fails here, before the state is touched
        if self.config.protect_cursor:
            _check_can_tag(self._load_table_as_is(), self.consumer)  # before any batch, not after the first
        checkpoint = self._store.load(self.consumer)
        if checkpoint is None:
            # the consumer must exist before it can be leased; its start is decided in run_batch
            table = self._load_table()
            checkpoint = self._create_consumer(table)
            self._created = True
        elif (checkpoint.catalog, checkpoint.table) != (self.config.catalog, self.config.table):
            raise ConfigError(
                f"consumer {self.consumer!r} follows {checkpoint.catalog}.{checkpoint.table}, not "
                f"{self.config.catalog}.{self.config.table}; pick another --consumer"
            )
        if checkpoint.lease_is_live() and checkpoint.lease is not None and lease_holder_is_dead(checkpoint.lease.owner):
            self._store.release_lease(self.consumer, checkpoint.lease.owner)
        self._store.acquire_lease(self.consumer, self._owner, self.config.lease_ttl_seconds)
        self._lease_renewed_at = time.monotonic()
        try:
            self._check_branch()
            self._check_sink(self._recorded_sink())
            _ = self.sink  # opened under the lease: opening may clear this consumer's staged leftovers
            self._check_sink(self._store.record_sink(self.consumer, self.sink_identity, owner=self._owner))
            self._bind_keyed_sink()
            if isinstance(self.sink, SparkTaskSink):
                self.sink.use_spark(self._task_session)
        except BaseException:
            self._forget_if_unstarted()
            self._store.release_lease(self.consumer, self._owner)
            raise

    def _recorded_sink(self) -> str | None:
        checkpoint = self._store.load(self.consumer)
        return checkpoint.sink if checkpoint is not None else None

    def _forget_if_unstarted(self) -> None:
        """A first run that fails before its first batch is written ahead leaves no consumer behind,
        so the corrected command starts it afresh (its --start, its sink) instead of being refused."""
        if self._created:
            self._created = not self._store.forget_unstarted(self.consumer, owner=self._owner)

    def _check_sink(self, recorded: str | None) -> None:
        """A consumer delivers to one sink: the first run records it once it opened, a later run
        must name the same.

        Otherwise a changed --sink would quietly continue from the cursor, so the new sink would
        miss everything before it and the old one everything after. A consumer from before
        schema version 2 has no sink recorded; its next run records its sink (under the lease).
        A sink that fails to open is never recorded.
        """
        sink = self.sink_identity
        if recorded is not None and recorded != sink:
            move = reset_command(self.config.state_url, self.consumer, "--sink", shlex.quote(sink), "--to", "...")
            raise ConfigError(
                f"consumer {self.consumer!r} delivers to {recorded}, not {sink}; a consumer keeps one sink: "
                f"run with --sink {shlex.quote(recorded)}, name another --consumer for the new sink, or move this "
                f"one with {move} (--to earliest|latest|snapshot:ID|...)"
            )

    def _bind_keyed_sink(self) -> None:
        """A mirror learns its key and checks its target before any batch; batches pair by that key."""
        if not isinstance(self.sink, KeyedSink):
            return
        if getattr(self.sink, "history", False) and not self.config.carry_over_removal:
            raise ConfigError(
                "a history sink keeps a version per change: with --keep-carry-over the rows a rewrite "
                "carries over unchanged (a compaction, an UPDATE that changes nothing) would become versions; "
                "drop --keep-carry-over"
            )
        table = self._load_table()
        key = mirror_key(table, None, self.config.identifier_columns)
        schema = change_arrow_schema(table, None, with_row_lineage=keyed_by_row_id(key))
        self.sink.bind(key, schema)
        self._sink_key = key

    def _identifiers(self, table: Table, schema_id: int | None) -> tuple[str, ...]:
        """What updates are paired by: a mirror's key, else --identifier-columns or the identifier fields."""
        if self._sink_key is not None:
            return mirror_key(table, schema_id, self.config.identifier_columns)
        return identifier_names(table, schema_id, self.config.identifier_columns)

    def _check_branch(self) -> None:
        """A consumer follows one branch: the one it was created with (main before schema 4).

        Its cursor is a snapshot of that branch's history; continuing it on another branch would
        deliver that branch's changes as if they followed the cursor.
        """
        checkpoint = self._store.load(self.consumer)
        recorded = checkpoint.branch if checkpoint is not None else self.config.branch
        if recorded != self.config.branch:
            move = reset_command(self.config.state_url, self.consumer, "--branch", shlex.quote(self.config.branch))
            raise ConfigError(
                f"consumer {self.consumer!r} follows branch {recorded!r}, not {self.config.branch!r}; a consumer "
                f"follows one branch: run with --branch {shlex.quote(recorded)}, name another --consumer for branch "
                f"{self.config.branch!r}, or move this one with {move} (and --to earliest|latest|... to move the "
                "cursor too)"
            )

    def close(self, *, abandon_session: bool = False) -> None:
        """Release the lease, close the sink and the store, and stop icetail's own Spark session.

        `abandon_session`: a session still starting is stopped at once (BackgroundSession.abandon)
        instead of being waited for.
        """
        try:
            self._store.release_lease(self.consumer, self._owner)
        finally:
            if self._sink is not None:
                self._sink.close()
            if self._owns_store:
                self._store.close()
            if self._own_session is not None:
                if abandon_session:
                    self._own_session.abandon()
                else:
                    self._own_session.close()

    def checkpoint(self) -> Checkpoint | None:
        """The consumer's stored state (cursor, in-flight batch)."""
        return self._store.load(self.consumer)

    def clear_stopped(self) -> bool:
        """Forget a stop `serve` recorded for this consumer (it delivers again); whether one was recorded."""
        return self._store.clear_stopped(self.consumer)

    def request_stop(self) -> None:
        """Finish the chunk in progress, commit it (and the sink commit group waiting), and return
        (the batch stays in flight)."""
        self._stop.set()

    @property
    def sink_identity(self) -> str:
        """The sink as recorded per consumer: the normalized URL (as given, for an injected sink)."""
        from icetail.sinks.factory import normalize_sink_url

        try:
            return normalize_sink_url(self.config.sink_url)
        except ConfigError:
            if self._sink is None:
                raise
            return self.config.sink_url.strip()

    @property
    def sink(self) -> Sink:
        if self._sink is None:
            from icetail.sinks.factory import open_sink

            self._sink = open_sink(self.config.sink_url, consumer=self.consumer)
        if self.config.output_format == "debezium" and not isinstance(self._sink, EnvelopeSink):
            self._sink = EnvelopeSink(self._sink, self.config.table)
        return self._sink

    def _new_sink_duplicates(self) -> int:
        """Duplicate keys a mirror sink counted (its `duplicates`) since the last call."""
        total = int(getattr(self._sink, "duplicates", 0) or 0)
        seen = self._sink_duplicates_seen if total >= self._sink_duplicates_seen else 0  # a sink opened again
        self._sink_duplicates_seen = total
        return total - seen

    # running ---------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> list[BatchOutcome]:
        """Run batches until caught up (or one batch with `once`), holding the lease throughout."""
        outcomes: list[BatchOutcome] = []
        while not self._stop.is_set():
            try:
                outcome = self.run_batch()
            except BaseException:
                self._forget_if_unstarted()
                raise
            self._created = False
            if outcome is None:
                break
            outcomes.append(outcome)
            if once or not outcome.completed:
                break
        return outcomes

    def run_batch(self) -> BatchOutcome | None:
        """Deliver the in-flight batch, or plan and deliver the next one; None when caught up."""
        started = time.monotonic()
        # renewed when a third of its ttl has passed, not on every poll: a write per poll of every
        # table serialized `serve`'s tables on a SQLite store (R33). A run that took the consumer
        # over is still refused at the first write (begin_batch, commit_chunk fence by owner).
        self._renew_lease_if_due()
        try:
            table = self._load_table()
        except RefNotFoundError as exc:
            stored = self._store.load(self.consumer)
            if stored is None or stored.inflight is None:
                raise self._branch_dropped() from exc
            table = self._load_table_as_is()  # a batch written ahead needs no branch: it is finished first
        check_row_lineage(table, self.config.with_row_lineage)
        checkpoint = self._store.load(self.consumer) or self._create_consumer(table)
        resumed = checkpoint.inflight is not None
        if resumed:
            self._start_session()
        planning_seconds = 0.0
        if checkpoint.inflight is None:
            plan = self._plan_next(table, checkpoint)
            planning_seconds = time.monotonic() - started
            if plan is None:
                return None
            to_snapshot = table.metadata.snapshot_by_id(plan.to_snapshot_id_inclusive or -1)
            batch = InflightBatch(
                batch_id=self._new_batch_id(checkpoint, plan),
                from_snapshot_exclusive=plan.from_snapshot_id_exclusive,
                to_snapshot_inclusive=plan.to_snapshot_id_inclusive,  # type: ignore[arg-type]
                to_timestamp_ms=to_snapshot.timestamp_ms if to_snapshot else 0,
                splits=plan.splits,
                shape=self._shape_of(checkpoint, plan),
            )
            self._store.begin_batch(self.consumer, batch, owner=self._owner)
            loaded = self._store.load(self.consumer)
            assert loaded is not None and loaded.inflight is not None
            checkpoint = loaded
        inflight = checkpoint.inflight
        assert inflight is not None
        tally = _Tally()
        completed = self._deliver(table, inflight, tally)
        if completed:
            self._store.finish_batch(self.consumer, inflight.batch.batch_id, owner=self._owner)
            if self.config.protect_cursor:
                self._protect(table, inflight.batch.to_snapshot_inclusive)
        batch = inflight.batch
        outcome = BatchOutcome(
            batch_id=batch.batch_id,
            from_snapshot_exclusive=batch.from_snapshot_exclusive,
            to_snapshot_inclusive=batch.to_snapshot_inclusive,
            snapshots=len({s.task.commit.snapshot_id for s in batch.splits}),
            rows_by_change_type=dict(tally.rows),
            splits=len(batch.splits),
            chunks=tally.chunks,
            data_files=len({s.task.data_file.path for s in batch.splits}),
            delete_files=len({d.path for s in batch.splits for d in s.task.deletes_before + s.task.deletes_after}),
            bytes_read=tally.bytes_read,
            row_groups=tally.row_groups,
            rows_decoded=tally.rows_decoded,
            deleted_rows=tally.deleted_rows,
            planning_seconds=planning_seconds,
            batch_seconds=time.monotonic() - started,
            resumed=resumed,
            completed=completed,
            collapsed=batch.shape.collapsed,
            snapshots_checked=tally.snapshots_checked,
            check_mismatches=tally.check_mismatches,
            schema_id=batch_schema_id(table, batch),
            sink_duplicate_keys=self._new_sink_duplicates(),
        )
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    # session ---------------------------------------------------------------------------
    def _start_session(self) -> None:
        """Start icetail's own session on a thread, unless one was given or is started already.

        Called once a batch is known to exist and its cursor is usable, so that planning, the
        batch's checkpoint write and the sink's opening overlap the JVM start and the first
        Python job; a run that finds nothing to do, or refuses its cursor, starts no JVM.
        """
        if self._spark is None and self._own_session is None:
            self._own_session = BackgroundSession()

    def _session(self) -> Any:
        """The session to read with: the given one (waited for if still starting), else our own."""
        if isinstance(self._spark, BackgroundSession):
            return self._spark.result()
        if self._spark is not None:
            return self._spark
        self._start_session()
        assert self._own_session is not None
        return self._own_session.result()

    def _task_session(self) -> Any:
        """The session a sink runs its Spark tasks on (SparkTaskSink), its jobs in this thread's pool."""
        session = self._session()
        if not is_connect(session):
            use_scheduler_pool(session.sparkContext, current_scheduler_pool())
        return session

    # planning --------------------------------------------------------------------------
    def _load_table(self) -> Table:
        """The table as seen from the followed branch (its current snapshot is the branch's head)."""
        table = table_on_branch(self._load_table_as_is(), self.config.branch)
        if self._planner is None:
            self._planner = Planner(
                table,
                self.config.target_split_bytes,
                branch=self.config.branch,
                manifest_cache_entries=self.config.manifest_cache_entries,
                share_manifest_cache=self._share_manifest_cache,
            )
        else:
            self._planner.refresh(table)
        return table

    def _load_table_as_is(self) -> Table:
        """The table as the catalog has it, for writing its metadata (the tag of --protect-cursor)."""
        return self.table_as_is()

    def table_as_is(self) -> Table:
        """The table as the catalog has it now, from the pipeline's catalog (opened on first use)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.config.catalog)
        return load_table(self._catalog, self.config.table)

    def _branch_dropped(self) -> BranchDroppedError:
        """The followed branch is gone under an existing consumer (dropped, or published and removed)."""
        checkpoint = self._store.load(self.consumer)
        cursor = checkpoint.cursor.snapshot_id if checkpoint is not None else None
        at = f"snapshot {cursor}" if cursor is not None else "before the first snapshot"
        branch, consumer = self.config.branch, self.consumer
        return BranchDroppedError(
            f"consumer {consumer!r}: branch {branch!r} of table {self.config.table} no longer exists (dropped, or "
            f"published and removed); the consumer delivered up to {at}: recreate the branch, or follow another with "
            f"{reset_command(self.config.state_url, consumer, '--branch', 'main', '--to', '...')} "
            "(--to latest|snapshot:ID|...) and run with --branch main"
        )

    def _create_consumer(self, table: Table) -> Checkpoint:
        mode = parse_start(self.config.start)
        cursor = initial_cursor(table.metadata, mode, self.config.table)
        self._full_next = mode.reads_full_snapshot
        # the sink is recorded once it opened (open), so a sink that fails to open is never recorded
        return self._store.ensure_consumer(
            self.consumer, self.config.catalog, self.config.table, cursor, None, self.config.branch
        )

    def _plan_next(self, table: Table, checkpoint: Checkpoint) -> ChangePlan | None:
        assert self._planner is not None
        metadata = table.metadata
        cursor = checkpoint.cursor
        full = self._full_next or (self.config.start == "full" and checkpoint.generation == 0)
        # a full read from before the first snapshot needs no history: an expired one is no problem
        problem = None if full and cursor.snapshot_id is None else cursor_problem(metadata, cursor, self.config.branch)
        if problem is not None:
            action = recovery_for(problem, self.config.on_missing_cursor, self.config.protect_cursor)
            if action == DIFF and problem.current_snapshot_id is not None and problem.cursor_snapshot_id is not None:
                # repair: the net change from the (kept) cursor snapshot to the current one, one batch
                self._start_session()
                return self._planner.plan_direct(
                    problem.cursor_snapshot_id, problem.current_snapshot_id, ordinal_base=self._next_ordinal(cursor)
                )
            cursor = self._recover_cursor(table, problem, action)
        current = metadata.current_snapshot_id
        if current is None or current == cursor.snapshot_id:
            if problem is not None:  # recovered onto the current snapshot (latest): a success, so it is stored
                self._store.reset_cursor(self.consumer, cursor, owner=self._owner)
            return None
        self._start_session()  # there is a batch: the JVM starts while it is planned and begun
        base = self._next_ordinal(cursor) if problem is None else 0
        full = self._full_next or full
        if cursor.snapshot_id is None and full:
            self._full_next = False
            plan = self._planner.plan_full(current, ordinal_base=base)
            # the batch starts where the stored cursor is (CAS), even when that snapshot is gone
            return replace(plan, from_snapshot_id_exclusive=checkpoint.cursor.snapshot_id)
        # a batch never spans a schema change: it ends before the first snapshot of a new schema
        chain = same_schema_prefix(metadata, snapshots_between(metadata, cursor.snapshot_id, current))
        if self.config.max_snapshots_per_batch is not None:
            chain = chain[: self.config.max_snapshots_per_batch]
        to_snapshot = chain[-1].snapshot_id
        plan = self._planner.plan(cursor.snapshot_id, to_snapshot, ordinal_base=base)
        if problem is not None:
            # the recovered cursor is stored only by the batch written ahead from the stored one (CAS):
            # a run that fails before that leaves the consumer as it found it
            return replace(plan, from_snapshot_id_exclusive=checkpoint.cursor.snapshot_id)
        return plan

    def _next_ordinal(self, cursor: Cursor) -> int:
        """`_change_ordinal` of the next snapshot: ordinals count from the consumer's (re)start.

        The newest finished batch records its first ordinal and snapshot count (BatchShape); after
        a reset (the cursor is not where that batch ended) the count starts again at 0.
        """
        history = self._store.history(self.consumer, 1)
        if not history or history[0].to_snapshot_inclusive != cursor.snapshot_id:
            return 0
        return history[0].shape.next_ordinal

    def _recover_cursor(self, table: Table, problem: CursorProblem, policy: str) -> Cursor:
        """The cursor `policy` continues from, in memory only: nothing is stored until the batch
        from the stored cursor is written ahead (or, with nothing to deliver, the run succeeded)."""
        if policy == "fail":
            raise problem.error(self.consumer, self.config.state_url)
        if policy == "full":
            # the full read is written ahead as the next batch, from the lost cursor, so a crash
            # before it is written simply repeats this decision
            self._full_next = True
            return Cursor.before_first_snapshot()
        cursor = initial_cursor(table.metadata, StartMode(policy), self.config.table)
        unusable = cursor_problem(table.metadata, cursor, self.config.branch)
        if unusable is not None:  # earliest, when the oldest history expired too
            error = unusable.error(self.consumer, self.config.state_url)
            raise type(error)(f"--on-missing-cursor {policy}: {error}")
        return cursor

    def _shape_of(self, checkpoint: Checkpoint, plan: ChangePlan) -> BatchShape:
        """Stored with the batch: a resumed batch cuts chunks exactly as before, the next one's ordinals follow."""
        first = plan.commits[0].ordinal if plan.commits else self._next_ordinal(checkpoint.cursor)
        return BatchShape(
            self.config.chunk_rows or None,
            first,
            len(plan.commits),
            plan.collapsed,
            net=self.config.net,
            schema_id=plan.schema_id,
            reconcile_partition_bytes=self._reconcile_partition_bytes(),
            net_partitioned=self.config.net,
        )

    def _reconcile_partition_bytes(self) -> int | None:
        """Stored with the batch: None on Spark Connect, which has no RDDs to shuffle with."""
        connect = os.environ.get("SPARK_REMOTE") or (
            self._spark is not None and not isinstance(self._spark, BackgroundSession) and is_connect(self._spark)
        )
        return None if connect else self.config.reconcile_partition_bytes or None

    def _new_batch_id(self, checkpoint: Checkpoint, plan: ChangePlan) -> str:
        """A label for people and sink file names; the batch's shape is read from BatchShape, never from here.

        It repeats the shape (`-c<chunk rows>-o<first ordinal>-n<snapshots>`, `-d1` for a repair
        batch) so that sink files and logs show it (docs/delivery.md).
        """
        shape = self._shape_of(checkpoint, plan)
        return (
            f"b{checkpoint.generation + 1:06d}-{uuid.uuid4().hex[:8]}"
            f"-c{shape.chunk_rows or 0}-o{shape.first_ordinal}-n{shape.snapshot_count}"
            + ("-d1" if shape.collapsed else "")
            + ("-net" if shape.net else "")
        )

    # delivery --------------------------------------------------------------------------
    def _deliver(self, table: Table, inflight: Inflight, tally: _Tally) -> bool:
        batch = inflight.batch
        splits = batch.splits
        if not splits:
            return True
        if isinstance(self.sink, EnvelopeSink):
            self.sink.prepare(batch.batch_id, _sequence_numbers(batch), full_start=_is_full_start(batch))
        schema_id = batch_schema_id(table, batch)
        splits = _with_commit_schema_ids(table, splits)
        identifiers = self._identifiers(table, schema_id)
        if batch.shape.net:
            return self._deliver_net(table, inflight, schema_id, identifiers, tally)
        tasks = [s.task for s in splits]
        lineage_pairing = has_row_lineage(table)
        carry_over_removal = self.config.carry_over_removal
        gathered = gathered_snapshots(
            tasks, carry_over_removal=carry_over_removal, identifiers=identifiers, lineage_pairing=lineage_pairing
        )
        with_lineage = self.config.with_row_lineage or keyed_by_row_id(self._sink_key)
        with_schema_id = self.config.with_schema_id
        progress = {p.split_id: p for p in inflight.progress}
        index_of = {s.split_id: i for i, s in enumerate(splits)}
        by_snapshot: dict[int, list[ChangeSplit]] = defaultdict(list)
        for split in splits:
            by_snapshot[split.task.commit.snapshot_id].append(split)
        # a staging sink (parquet, unpartitioned Iceberg) is written by the Spark tasks themselves
        stager = (
            self.sink.stager(
                change_arrow_schema(table, schema_id, with_schema_id=with_schema_id, with_row_lineage=with_lineage)
            )
            if isinstance(self.sink, StagingSink)
            else None
        )
        staging = stager is not None
        partitioned = {
            snapshot_id: snapshot
            for snapshot_id, snapshot in partitioned_snapshots(
                splits, gathered, batch.shape.reconcile_partition_bytes
            ).items()
            if any(not progress[s.split_id].done for s in snapshot.splits)
        }
        requests: list[SplitRequest] = []
        for split in splits:
            snapshot_id = split.task.commit.snapshot_id
            if snapshot_id in partitioned:
                continue  # reconciled by Spark tasks, in its place among the others (segments_in_order)
            if snapshot_id in gathered:
                if any(not progress[s.split_id].done for s in by_snapshot[snapshot_id]):
                    # reconcile needs the whole snapshot again, with the row ids it pairs by
                    requests.append(SplitRequest(split, 0, with_row_lineage=with_lineage or lineage_pairing))
            elif not progress[split.split_id].done:
                start = progress[split.split_id].next_row_exclusive or 0
                stage_as = SplitSlot(self.consumer, batch.batch_id, index_of[split.split_id]) if staging else None
                requests.append(SplitRequest(split, start, stage_as, with_row_lineage=with_lineage))
        if not requests and not partitioned:
            return True
        context = read_context(table, schema_id, tasks, with_schema_id=with_schema_id)
        fully_read = {r.split.split_id for r in requests if r.start_row_inclusive == 0}
        fully_read |= {s.split_id for p in partitioned.values() for s in p.splits}
        verifier = self._verifier(table, batch, fully_read)
        read_schema = change_arrow_schema(
            table, schema_id, with_schema_id=with_schema_id, with_row_lineage=with_lineage or lineage_pairing
        )
        pairing = Pairing(read_schema, identifiers, carry_over_removal, lineage_pairing, with_lineage)
        snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in splits}
        strict = self._verify == VerifyMode.STRICT
        # staged chunks of a group-committing sink (Iceberg) wait in `group` and are committed together;
        # so do the read rows of a group-writing sink (the PostgreSQL mirror)
        writes_groups = self._groups_writes()
        group = ChunkGroup(self.config.group_policy) if (staging and self._groups_commits()) or writes_groups else None

        def released_from(segment: list[SplitRequest]) -> Iterator[Release]:
            chunks = run_splits(self._session(), context, segment, chunk_rows=batch.shape.chunk_rows, stager=stager)
            on_check = lambda c: self._checked(batch, c, tally)  # noqa: E731
            yield from releases(
                self._tallied(chunks, tally), snapshot_of, gathered, verifier, strict=strict, on_check=on_check
            )

        for release in self._committing_on_failure(
            segments_in_order(requests, index_of, partitioned.values(), released_from), batch, group, tally
        ):
            if isinstance(release, PartitionedSnapshot):
                self._commit_group(batch, group, tally)
                spec = partition_spec(
                    release,
                    first_output=progress[release.anchor.split_id].parts_done or 0,
                    read_schema=read_schema,
                    identifiers=identifiers,
                    carry_over_removal=carry_over_removal,
                    lineage_pairing=lineage_pairing,
                    with_row_lineage=with_lineage,
                    chunk_rows=batch.shape.chunk_rows,
                    stage_as=SplitSlot(self.consumer, batch.batch_id, release.indexes[0]) if staging else None,
                )
                if not deliver_partitioned(
                    self._session(),
                    context,
                    spec,
                    release,
                    progress,
                    stager,
                    self._partition_delivery(batch, tally, verifier),
                ):
                    return False
                continue
            if release.reconcile:
                self._commit_group(batch, group, tally)
                rows = pairing.reconciled(release.batches)
                snapshot_splits = by_snapshot[release.snapshot_id]
                anchor_index = index_of[snapshot_splits[0].split_id]
                self._deliver_reconciled(batch, release, rows, snapshot_splits, anchor_index, progress, tally)
            else:
                for chunk in release.chunks:
                    key = SplitSlot(self.consumer, batch.batch_id, index_of[chunk.split_id]).chunk_key(
                        chunk.split_id, chunk.row_start_inclusive
                    )
                    if group is not None and (chunk.staged is not None or not chunk.row_count or writes_groups):
                        group.add(key, chunk)
                        if group.full():
                            self._commit_group(batch, group, tally)
                        continue
                    self._commit_group(batch, group, tally)  # in delivery order: what waits goes first
                    self._deliver_chunk(batch, key, chunk, tally)
                    _hold_for_test(self._stop)
            if self._stop.is_set():
                self._commit_group(batch, group, tally)
                return False
        self._commit_group(batch, group, tally)
        return not self._stop.is_set() or self._all_done()

    def _partition_delivery(
        self, batch: InflightBatch, tally: _Tally, verifier: SnapshotVerifier | None
    ) -> PartitionDelivery:
        """A partitioned snapshot's hooks: its read chunks are tallied and checked as read ones are."""

        def on_read(chunk: Chunk) -> None:
            if self._on_chunk is not None:
                self._on_chunk(chunk)
            tally.add_chunk(chunk)
            check = verifier.add(chunk) if verifier is not None else None
            if check is not None:
                self._checked(batch, check, tally)

        def after_commit() -> None:
            self._renew_lease_if_due()
            _hold_for_test(self._stop)

        return PartitionDelivery(
            self.sink,
            self._store,
            self.consumer,
            self._owner,
            batch.batch_id,
            on_read,
            tally.add_counts,
            after_commit,
            self._stop.is_set,
            self._renew_lease_if_due,
        )

    def _committing_on_failure(
        self,
        released: Iterator[Release | PartitionedSnapshot],
        batch: InflightBatch,
        group: ChunkGroup | None,
        tally: _Tally,
    ) -> Iterator[Release | PartitionedSnapshot]:
        """`released`; when the read fails or a snapshot is refused (`--verify strict`), the chunks
        released before it are still committed, as they would have been without a group."""
        try:
            yield from released
        except Exception:
            try:
                self._commit_group(batch, group, tally)
            except Exception as exc:  # the group is read again on the next run; the read's error is the news
                log.warning("chunks of batch %s left uncommitted after a failed read: %s", batch.batch_id, exc)
            raise

    def _groups_commits(self) -> bool:
        return isinstance(self.sink, GroupCommitSink) and self.config.group_policy.groups

    def _groups_writes(self) -> bool:
        return isinstance(self.sink, GroupWriteSink) and self.config.group_policy.groups

    def _commit_group(self, batch: InflightBatch, group: ChunkGroup | None, tally: _Tally) -> None:
        """The waiting staged chunks made visible in one sink commit, then their offsets in one transaction."""
        if group is None or not len(group):
            return
        members = group.take()
        staged = [(m.key, m.chunk.staged) for m in members if m.chunk.staged is not None]
        tokens: dict[ChunkKey, str | None] = {}
        if staged:
            committed = cast(GroupCommitSink, self.sink).commit_staged_group(staged)
            tokens = {key: token for (key, _), token in zip(staged, committed, strict=True)}
        rows = [(m.key, m.chunk.batch) for m in members if m.chunk.staged is None and m.chunk.batch is not None]
        written = [(key, pa.Table.from_batches([batch])) for key, batch in rows if batch.num_rows]
        if written:
            applied = cast(GroupWriteSink, self.sink).write_group(written)
            tokens |= {key: token for (key, _), token in zip(written, applied, strict=True)}
        for member in members:
            tally.add_counts(member.chunk.change_counts)
        self._store.commit_chunks(self.consumer, batch.batch_id, coalesced(members, tokens), owner=self._owner)
        self._renew_lease_if_due()
        _hold_for_test(self._stop)

    def _tallied(self, chunks: Iterator[Chunk], tally: _Tally) -> Iterator[Chunk]:
        """The read chunks, each seen by the on_chunk hook and counted as read."""

        def seen(chunk: Chunk) -> None:
            if self._on_chunk is not None:
                self._on_chunk(chunk)
            tally.add_chunk(chunk)

        return observed(chunks, seen)

    def _deliver_net(
        self, table: Table, inflight: Inflight, schema_id: int | None, identifiers: tuple[str, ...], tally: _Tally
    ) -> bool:
        """The batch's net changes (reader/net.py) as one chunk anchored at its first split.

        Every split is read again from its first row (the net rows are a function of all of them),
        the rows are written under one chunk key and every split is committed done in one
        transaction: a crash before that commit leaves nothing committed, and the resumed batch
        reads the same persisted splits in the same order, so it writes the same rows under the
        same key. A stop request abandons the read; the batch stays in flight.
        """
        batch = inflight.batch
        pending = [p for p in inflight.progress if not p.done]
        if not pending:
            return True
        with_schema_id = self.config.with_schema_id
        # keyed by `_row_id` on a v3 table: a function of the persisted splits (their first_row_ids),
        # so a resumed batch folds the same rows the same way
        lineage = NetLineage(
            keyed=has_row_lineage(table), output=self.config.with_row_lineage or keyed_by_row_id(self._sink_key)
        )
        schema = lineage.read_schema(table, schema_id, with_schema_id=with_schema_id)
        splits = _with_commit_schema_ids(table, batch.splits)
        partitioned = (
            net_partitioned(splits, batch.shape.reconcile_partition_bytes) if batch.shape.net_partitioned else None
        )
        if partitioned is not None:
            progress = {p.split_id: p for p in inflight.progress}
            try:
                return self._deliver_net_partitioned(table, batch, partitioned, progress, schema, identifiers, tally)
            except NetFoldNotExact as exc:
                if progress[partitioned.anchor.split_id].parts_done:  # cannot be: the flag precedes every output
                    raise
                log.info("batch %s: net changes folded in the driver: %s", batch.batch_id, exc)
        snapshot_of = {s.split_id: s.task.commit.snapshot_id for s in splits}
        requests = [SplitRequest(s, with_row_lineage=lineage.reads) for s in splits]
        context = read_context(table, schema_id, [s.task for s in splits], with_schema_id=with_schema_id)
        next_rows: dict[str, int] = {}
        verifier = self._verifier(table, batch)  # every split is read from its first row

        def read() -> Iterator[Chunk]:
            chunks = run_splits(self._session(), context, requests, chunk_rows=batch.shape.chunk_rows)
            for chunk in self._tallied(chunks, tally):
                next_rows[chunk.split_id] = max(next_rows.get(chunk.split_id, 0), chunk.next_row_exclusive)
                self._renew_lease_if_due()
                if self._stop.is_set():
                    raise _Abandoned
                yield chunk

        # the fold holds every row until the batch is read: a refused snapshot raises before any is written
        released = releases(read(), snapshot_of, set(), verifier, on_check=lambda c: self._checked(batch, c, tally))
        try:
            rows = net_rows(lineage, schema, snapshot_batches(released), [s.task for s in splits], identifiers)
        except _Abandoned:
            return False
        anchor = batch.splits[0]
        token = None
        if rows.num_rows:
            token = self.sink.write(SplitSlot(self.consumer, batch.batch_id, 0).chunk_key(anchor.split_id, 0), rows)
        commits = [
            ChunkCommit(
                split_id=p.split_id,
                next_row_exclusive=max(p.next_row_exclusive or 0, next_rows.get(p.split_id, 0)),
                rows_in_chunk=rows.num_rows if p.split_id == anchor.split_id else 0,
                done=True,
                sink_token=token if p.split_id == anchor.split_id else None,
            )
            for p in pending
        ]
        self._store.commit_chunks(self.consumer, batch.batch_id, commits, owner=self._owner)
        tally.add_rows(rows)
        return True

    def _deliver_net_partitioned(
        self,
        table: Table,
        batch: InflightBatch,
        partitioned: PartitionedSnapshot,
        progress: dict[str, SplitProgress],
        schema: pa.Schema,
        identifiers: tuple[str, ...],
        tally: _Tally,
    ) -> bool:
        """The batch's net changes folded by Spark tasks in partitions (reader/net_shuffle.py), a chunk
        each, committed as the partitions of a reconciled snapshot are (monitor/engine/partitioned.py):
        a crash resumes at the first partition not committed. NetFoldNotExact before any output when
        the driver must fold it."""
        schema_id = batch_schema_id(table, batch)
        with_schema_id = self.config.with_schema_id
        spec = net_spec(
            partitioned,
            first_output=progress[partitioned.anchor.split_id].parts_done or 0,
            read_schema=schema,
            identifiers=identifiers,
            row_lineage=has_row_lineage(table),
            output_lineage=self.config.with_row_lineage or keyed_by_row_id(self._sink_key),
            chunk_rows=batch.shape.chunk_rows,
        )
        context = read_context(table, schema_id, [s.task for s in partitioned.splits], with_schema_id=with_schema_id)
        verifier = self._verifier(table, batch)  # every split is read from its first row
        delivery = self._partition_delivery(batch, tally, verifier)
        return deliver_partitioned(self._session(), context, spec, partitioned, progress, None, delivery)

    def _verifier(
        self, table: Table, batch: InflightBatch, fully_read_split_ids: set[str] | None = None
    ) -> SnapshotVerifier | None:
        """What checks the batch's snapshots (None under off); only those read whole here can be checked."""
        return verifier_for(
            self._verify,
            table.metadata,
            batch.splits,
            from_snapshot_exclusive=batch.from_snapshot_exclusive,
            collapsed=batch.shape.collapsed,
            fully_read_split_ids=fully_read_split_ids,
        )

    def _checked(self, batch: InflightBatch, check: SnapshotCheck, tally: _Tally) -> None:
        """Count, report and log a snapshot's check; under strict a mismatch raises SnapshotCheckError."""
        if check.rules:
            tally.snapshots_checked += 1
        tally.check_mismatches += len(check.mismatches)
        if self._on_check is not None:
            self._on_check(check)
        context = {"consumer": self.consumer, "table": self.config.table, "batch_id": batch.batch_id}
        report(check, self._verify, context)

    def _all_done(self) -> bool:
        checkpoint = self._store.load(self.consumer)
        return checkpoint is not None and checkpoint.inflight is not None and not checkpoint.inflight.pending()

    def _deliver_chunk(self, batch: InflightBatch, key: ChunkKey, chunk: Chunk, tally: _Tally) -> None:
        token = None
        if chunk.staged is not None:
            # the Spark task wrote the rows; the driver only makes them visible, in order
            token = cast(StagingSink, self.sink).commit_staged(key, chunk.staged)
        elif chunk.batch is not None and chunk.batch.num_rows:
            token = self.sink.write(key, pa.Table.from_batches([chunk.batch]))
        tally.add_counts(chunk.change_counts)  # counted by read_split, staged or not
        self._store.commit_chunk(
            self.consumer,
            batch.batch_id,
            chunk.split_id,
            chunk.next_row_exclusive,
            chunk.row_count,
            chunk.done,
            token,
            owner=self._owner,
        )
        self._renew_lease_if_due()

    def _deliver_reconciled(
        self,
        batch: InflightBatch,
        release: Release,
        rows: pa.Table,
        snapshot_splits: list[ChangeSplit],
        anchor_index: int,
        progress: dict[str, Any],
        tally: _Tally,
    ) -> None:
        """One snapshot's reconciled `rows` as one chunk anchored at its first split (`anchor_index` in
        the batch), committed in one transaction."""
        anchor = snapshot_splits[0]
        token = None
        if rows.num_rows:
            key = SplitSlot(self.consumer, batch.batch_id, anchor_index).chunk_key(anchor.split_id, 0)
            token = self.sink.write(key, rows)
        next_rows: dict[str, int] = {}
        for chunk in release.chunks:
            next_rows[chunk.split_id] = max(next_rows.get(chunk.split_id, 0), chunk.next_row_exclusive)
        commits = [
            ChunkCommit(
                split_id=split.split_id,
                next_row_exclusive=max(
                    next_rows.get(split.split_id, 0), progress[split.split_id].next_row_exclusive or 0
                ),
                rows_in_chunk=rows.num_rows if split is anchor else 0,
                done=True,
                sink_token=token if split is anchor else None,
            )
            for split in snapshot_splits
            if not progress[split.split_id].done
        ]
        # one transaction: a crash cannot leave the snapshot half committed
        self._store.commit_chunks(self.consumer, batch.batch_id, commits, owner=self._owner)
        tally.add_rows(rows)
        self._renew_lease_if_due()

    def _renew_lease_if_due(self) -> None:
        if time.monotonic() - self._lease_renewed_at > self.config.lease_ttl_seconds / 3:
            self._renew_lease()

    def _renew_lease(self) -> None:
        self._store.renew_lease(self.consumer, self._owner, self.config.lease_ttl_seconds)
        self._lease_renewed_at = time.monotonic()

    def _protect(self, table: Table, snapshot_id: int) -> None:
        """Keep tag icetail-<consumer> on the committed snapshot so expiry keeps what we still need.

        Written through the table as the catalog has it, never through a branch view: the tag is
        on the snapshot whatever branch it belongs to.
        """
        tag = f"icetail-{self.consumer}"
        table = self._load_table_as_is()
        try:
            with table.manage_snapshots() as manage:
                if tag in table.metadata.refs:
                    manage.remove_tag(tag)
                manage.create_tag(snapshot_id, tag)
        except NotImplementedError as exc:  # pyiceberg cannot write this table's metadata
            raise ConfigError(_cannot_tag(table, self.consumer, str(exc))) from exc


def batch_schema_id(table: Table, batch: InflightBatch) -> int | None:
    """The schema a batch is projected onto: stored with it, or (written before store schema 6) its to-snapshot's."""
    if batch.shape.schema_id is not None:
        return batch.shape.schema_id
    return schema_id_of(table, batch.to_snapshot_inclusive)


def _with_commit_schema_ids(table: Table, splits: tuple[ChangeSplit, ...]) -> tuple[ChangeSplit, ...]:
    """Splits persisted before split format 3 lack their commit's schema id (`_schema_id`): look it up."""
    if all(s.task.commit.schema_id is not None for s in splits):
        return splits
    filled = []
    for split in splits:
        commit = split.task.commit
        if commit.schema_id is None:
            commit = replace(commit, schema_id=schema_id_of(table, commit.snapshot_id))
            split = replace(split, task=replace(split.task, commit=commit))
        filled.append(split)
    return tuple(filled)


class _Abandoned(Exception):
    """A stop request interrupted a net batch's read; nothing of the batch is committed."""


def _check_can_tag(table: Table, consumer: str) -> None:
    """--protect-cursor writes a tag through pyiceberg, which writes table metadata itself through
    every catalog but REST (where the server writes it), and pyiceberg 0.12 cannot write format v3
    (apache/iceberg-python#1551): refuse at start rather than after the first delivered batch."""
    from pyiceberg.catalog.rest import RestCatalog

    if table.metadata.format_version >= 3 and not isinstance(table.catalog, RestCatalog):
        raise ConfigError(_cannot_tag(table, consumer, "pyiceberg cannot write format-version 3 table metadata"))


def _cannot_tag(table: Table, consumer: str, reason: str) -> str:
    name = ".".join(table.name())
    return (
        f"--protect-cursor cannot keep tag icetail-{consumer} on table {name}: {reason}; run without "
        f"--protect-cursor and keep the cursor snapshot with a tag of your own (Spark SQL: ALTER TABLE "
        f"{name} CREATE OR REPLACE TAG ...; see docs/delivery.md), or follow the table through a REST catalog"
    )


def _hold_for_test(stop: threading.Event) -> None:
    """Test seam (kernel/seams.py): a test may hold a committed chunk here, until a stop is requested
    (or it lets go), to act while the batch is provably in progress instead of racing its end."""
    seams.reached(seams.AFTER_CHUNK, stop.wait)


def _sequence_numbers(batch: InflightBatch) -> dict[int, int]:
    """The data sequence number of each commit of `batch` (the Debezium envelope's `source`)."""
    return {s.task.commit.snapshot_id: s.task.commit.sequence_number for s in batch.splits}


def _is_full_start(batch: InflightBatch) -> bool:
    """Whether `batch` reads one snapshot whole (`--start full`, or a diff from nothing after lost
    history): it starts before everything yet holds one commit that has a parent. From the batch
    as stored, so a resumed batch says the same."""
    commits = {s.task.commit for s in batch.splits}
    return batch.from_snapshot_exclusive is None and len(commits) == 1 and next(iter(commits)).parent_id is not None
