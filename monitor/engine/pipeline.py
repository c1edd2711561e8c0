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
The pipeline orchestrates (lease, plan, write-ahead, recovery, commit); each way of delivering a
batch is a class of monitor/engine/delivery/, chosen once, when the sink is open, from what it can do.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icetail.kernel.errors import BranchDroppedError, ConfigError, RefNotFoundError
from icetail.kernel.processes import host_name, lease_holder_is_dead
from icetail.monitor.engine.api import (
    change_arrow_schema,
    check_row_lineage,
)
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.delivery.choice import ChosenDelivery, choose_delivery
from icetail.monitor.engine.delivery.context import DeliveryContext, Tally, batch_schema_id
from icetail.monitor.engine.hints import reset_command
from icetail.monitor.engine.lease_clock import LeaseClock
from icetail.monitor.engine.mirror_key import keyed_by_row_id, mirror_key
from icetail.monitor.engine.start_mode import StartMode, parse_start
from icetail.monitor.engine.startup import DIFF, CursorProblem, cursor_problem, initial_cursor, recovery_for
from icetail.monitor.engine.verify import (
    SnapshotCheck,
    parse_verify_mode,
)
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import ChangePlan, Planner, same_schema_prefix
from icetail.monitor.planning.refs import table_on_branch
from icetail.reader.changes.reconcile import HIDDEN_PREFIX
from icetail.reader.spark.background import BackgroundSession
from icetail.reader.spark.session import current_scheduler_pool, is_connect, use_scheduler_pool
from icetail.reader.split.read import Chunk
from icetail.sinks.base import Sink
from icetail.sinks.keyed.contract import KeyedSink, SparkTaskSink
from icetail.sinks.registry import check_sink_reachable, formatted, open_sink
from icetail.state.checkpoint import (
    BatchShape,
    Checkpoint,
    Cursor,
    InflightBatch,
)
from icetail.state.store import CheckpointStore, open_store
from icetail.state.urls import new_sqlite_file, remove_sqlite_file

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
        owner: str | None = None,
    ) -> None:
        self.config = config
        # serve's pipelines plan from one process-wide manifest cache (its bound is the process's)
        self._share_manifest_cache = share_manifest_cache
        self.consumer = config.consumer_id
        self._owns_store = store is None
        # opened on first use (`_store`): `open` checks the sink and the source first, so a refused run
        # creates no store; one it created and left without a consumer is removed on close (issue 33.3)
        self._opened_store: CheckpointStore | None = store
        self._new_store_file: str | None = None
        self._sink = sink
        self._sink_duplicates_seen = 0  # the sink's `duplicates` as last reported in a BatchOutcome
        self._spark = spark  # a SparkSession, a BackgroundSession still starting, or None: our own
        self._own_session: BackgroundSession | None = None
        self._stop = stop_event or threading.Event()
        self._on_batch = on_batch
        self._on_chunk = on_chunk
        self._on_check = on_check
        self._verify = parse_verify_mode(config.verify)
        # the lease owner: this run, or the `serve` replica that runs it (host:pid:token either way)
        self._owner = owner or f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._planner: Planner | None = None
        self._lease = LeaseClock(self.consumer, config.lease_ttl_seconds)  # until when the lease surely holds
        self._full_next = False
        self._created = False  # this run created the consumer and has not begun a batch yet
        self._sink_key: tuple[str, ...] | None = None  # a mirror's key (KeyedSink), bound at open
        # opened once and reused: opening a catalog costs more than loading a table (a SQL catalog:
        # ~12 ms of CPU for its engine and schema check against ~1 ms), paid every poll of every table (R33)
        self._catalog: Catalog | None = None
        self._chosen: ChosenDelivery | None = None  # how batches reach the sink: chosen once it is open

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
        it to expire. A refusal closes the store this pipeline opened, and removes it if this
        pipeline created it and it holds nothing.
        """
        try:
            self._open()
        except BaseException:
            if self._owns_store and self._opened_store is not None:
                self._discard_store_if_unused()
                self._opened_store = None
            raise

    def _open(self) -> None:
        if self._sink is None:
            # a bad sink URL, a sink database that refuses us, a missing catalog or table fail here,
            # before the store is opened (and created)
            check_sink_reachable(self.config.sink_url)
        if self._opened_store is None:
            self._load_table_as_is()
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
        with self._lease.renewal():
            self._store.acquire_lease(self.consumer, self._owner, self.config.lease_ttl_seconds)
        try:
            self._check_branch()
            self._check_sink(self._recorded_sink())
            _ = self.sink  # opened under the lease: opening may clear this consumer's staged leftovers
            self._check_sink(self._store.record_sink(self.consumer, self.sink_identity, owner=self._owner))
            self._bind_keyed_sink()
            if isinstance(self.sink, SparkTaskSink):
                self.sink.use_spark(self._task_session)
            self._chosen = None
            self._delivery()  # chosen now the sink is open and a mirror's key bound
        except BaseException:
            self._forget_if_unstarted()
            self._store.release_lease(self.consumer, self._owner)
            raise

    def _delivery(self) -> ChosenDelivery:
        """The ways batches reach the sink (monitor/engine/delivery/), chosen once, from what the sink
        can do, when it is open and a mirror's key is bound."""
        if self._chosen is None:
            context = DeliveryContext(
                self.config,
                self.sink,
                self._store,
                self.consumer,
                self._owner,
                self._stop,
                self._renew_lease_if_due,
                self._before_write,
                self._session,
                self._verify,
                self._sink_key,
                self._on_chunk,
                self._on_check,
            )
            self._chosen = choose_delivery(context)
        return self._chosen

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
            if self._opened_store is not None:
                self._store.release_lease(self.consumer, self._owner)
                self._lease.released()
        finally:
            if self._sink is not None:
                self._sink.close()
            if self._owns_store and self._opened_store is not None:
                self._discard_store_if_unused()
            if self._own_session is not None:
                if abandon_session:
                    self._own_session.abandon()
                else:
                    self._own_session.close()

    @property
    def _store(self) -> CheckpointStore:
        """The checkpoint store, opened (and created when missing) on first use."""
        if self._opened_store is None:
            self._new_store_file = new_sqlite_file(self.config.state_url)
            self._opened_store = open_store(self.config.state_url, history_limit=self.config.history_retention)
        return self._opened_store

    def _discard_store_if_unused(self) -> None:
        """Close the store; remove its SQLite file if this pipeline created it and it holds no consumer
        and no stop: a refused first run leaves nothing behind."""
        store = self._store
        unused = False
        try:
            if self._new_store_file is not None:
                unused = not store.list_consumers() and not store.stopped_consumers()
        except Exception:  # noqa: BLE001 - the store is kept; the error that ended the run matters more
            log.warning("could not check whether the new checkpoint store is unused", exc_info=True)
        finally:
            store.close()
        if unused and self._new_store_file is not None:
            remove_sqlite_file(self._new_store_file)

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
        from icetail.sinks.urls import normalize_sink_url

        try:
            return normalize_sink_url(self.config.sink_url)
        except ConfigError:
            if self._sink is None:
                raise
            return self.config.sink_url.strip()

    @property
    def sink(self) -> Sink:
        if self._sink is None:
            self._sink = open_sink(self.config.sink_url, consumer=self.consumer)
        # the envelope (--format debezium) goes around an injected sink too, once
        self._sink = formatted(self._sink, self.config.output_format, self.config.table)
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
            self._before_write("batch's write-ahead")
            self._store.begin_batch(self.consumer, batch, owner=self._owner)
            loaded = self._store.load(self.consumer)
            assert loaded is not None and loaded.inflight is not None
            checkpoint = loaded
        inflight = checkpoint.inflight
        assert inflight is not None
        tally = Tally()
        completed = self._delivery().deliver(table, inflight, tally)
        if completed:
            self._before_write("batch's commit")
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

    def keep_lease(self) -> None:
        """Renew the lease if a third of its TTL passed: `serve` keeps an idle consumer's lease between cycles."""
        self._renew_lease_if_due()

    def _renew_lease_if_due(self) -> None:
        if self._lease.due():
            self._renew_lease()

    def _renew_lease(self) -> None:
        with self._lease.renewal():  # a renewal that hangs or fails moves no deadline
            self._store.renew_lease(self.consumer, self._owner, self.config.lease_ttl_seconds)

    def _before_write(self, what: str) -> None:
        """Before a sink write or a store commit of a batch: the lease renewed when due, then
        LeaseDeadlineError if it may have expired meanwhile (monitor/engine/lease_clock.py)."""
        self._renew_lease_if_due()
        self._lease.check(what)

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
