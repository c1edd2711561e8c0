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

import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError, RefNotFoundError
from icetail.monitor.engine.catalog import load_table, open_catalog
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.cursor_tag import catch_up_cursor_tag, check_can_tag, keep_cursor_tag
from icetail.monitor.engine.delivery.choice import ChosenDelivery, choose_delivery
from icetail.monitor.engine.delivery.context import DeliveryContext, Tally, batch_schema_id
from icetail.monitor.engine.engine_choice import EngineChoice
from icetail.monitor.engine.lease import ConsumerLease, run_owner
from icetail.monitor.engine.next_batch import NextBatch
from icetail.monitor.engine.opening import (
    bind_keyed_sink,
    branch_dropped,
    check_branch,
    check_follows_table,
    check_sink,
    recorded_sink,
)
from icetail.monitor.engine.outcome import BatchOutcome, batch_outcome
from icetail.monitor.engine.sessions import PipelineSession
from icetail.monitor.engine.store_handle import StoreHandle
from icetail.monitor.engine.verify import parse_verify_mode
from icetail.reader.changes.checks import SnapshotCheck
from icetail.reader.changes.read_setup import check_row_lineage
from icetail.reader.split.read import Chunk
from icetail.sinks.base import CommitFencedSink, Sink
from icetail.sinks.keyed.contract import SparkTaskSink
from icetail.sinks.registry import check_sink_reachable, formatted, open_sink
from icetail.state.checkpoint import Checkpoint
from icetail.state.store import CheckpointStore

__all__ = ["BatchOutcome", "Pipeline"]

RELEASE_AFTER_BYTES = 8 * 1024 * 1024  # a batch read in process that read this much hands its memory back


class Pipeline:
    """Follows one table for one consumer; `run_batch` delivers one batch exactly once.

    Its collaborators each keep one role: the checkpoint store (store_handle.py), the lease
    (lease.py), the Spark session (sessions.py), planning (next_batch.py), the opening checks
    (opening.py, cursor_tag.py) and delivering (delivery/).
    """

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
        self.consumer = config.consumer_id
        # opened on first use: `open` checks the sink and the source first, so a refused run
        # creates no store; one it created and left without a consumer is removed on close (issue 33.3)
        self._stores = StoreHandle(config.state_url, config.history_retention, store)
        self._sink = sink
        self._sink_duplicates_seen = 0  # the sink's `duplicates` as last reported in a BatchOutcome
        # a SparkSession, a BackgroundSession still starting, serve's SparkOnDemand, or None: our own
        self._session = PipelineSession(spark)
        self._stop = stop_event or threading.Event()
        self._on_batch = on_batch
        self._on_chunk = on_chunk
        self._on_check = on_check
        self._verify = parse_verify_mode(config.verify)
        # the lease owner: this run, or the `serve` replica that runs it (host:pid:token either way)
        self._owner = owner or run_owner()
        self._lease = ConsumerLease(self._stores, self.consumer, self._owner, config.lease_ttl_seconds)
        # serve's pipelines plan from one process-wide manifest cache (its bound is the process's)
        self._next = NextBatch(config, self._stores, self._owner, self._session, share_cache=share_manifest_cache)
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
            self._stores.abandon()
            raise

    def _open(self) -> None:
        if self._sink is None:
            # a bad sink URL, a sink database that refuses us, a missing catalog or table fail here,
            # before the store is opened (and created)
            check_sink_reachable(self.config.sink_target)
        if self._stores.opened is None:
            self.table_as_is()
        if self.config.protect_cursor:
            check_can_tag(self.table_as_is(), self.consumer)  # before any batch, not after the first
        checkpoint = self._store.load(self.consumer)
        if checkpoint is None:
            # the consumer must exist before it can be leased; its start is decided in run_batch
            checkpoint = self._next.create_consumer(self._load_table())
            self._created = True
        else:
            check_follows_table(self.config, checkpoint)
        self._lease.acquire(checkpoint)
        try:
            check_branch(self.config, leased := self._store.load(self.consumer))  # as the lease left it
            if self.config.protect_cursor:  # under the lease: one writer of the tag
                catch_up_cursor_tag(self.table_as_is(), self.consumer, leased)
            check_sink(self.config, recorded_sink(leased), self.sink_identity)
            _ = self.sink  # opened under the lease: opening may clear this consumer's staged leftovers
            recorded = self._store.record_sink(self.consumer, self.sink_identity, owner=self._owner)
            check_sink(self.config, recorded, self.sink_identity)
            self._sink_key = bind_keyed_sink(self.config, self.sink, self._load_table)
            if isinstance(self.sink, SparkTaskSink):
                self.sink.use_spark(self._session.for_tasks)
            if isinstance(self.sink, CommitFencedSink):
                self.sink.fence_commits(self._lease.check_deadline)
            self._chosen = None
            self._delivery()  # chosen now the sink is open and a mirror's key bound
        except BaseException:
            self._forget_if_unstarted()
            self._lease.release()
            raise

    def _delivery(self) -> ChosenDelivery:
        """The ways batches reach the sink (monitor/engine/delivery/), chosen once, from what the sink
        can do, when it is open and a mirror's key is bound."""
        if self._chosen is None:
            context = DeliveryContext(
                self.config, self.sink, self._store, self.consumer, self._owner, self._stop,
                self._renew_lease_if_due, self._lease.check_before, self._session.get, self._verify,
                self._sink_key, self._on_chunk, self._on_check,
            )  # fmt: skip
            self._chosen = choose_delivery(context)
        return self._chosen

    def _forget_if_unstarted(self) -> None:
        """A first run that fails before its first batch is written ahead leaves no consumer behind,
        so the corrected command starts it afresh (its --start, its sink) instead of being refused."""
        if self._created:
            self._created = not self._store.forget_unstarted(self.consumer, owner=self._owner)

    def close(self, *, abandon_session: bool = False) -> None:
        """Release the lease, close the sink and the store, and stop icetail's own Spark session.

        `abandon_session`: a session still starting is stopped at once (BackgroundSession.abandon)
        instead of being waited for.
        """
        try:
            if self._stores.opened is not None:
                self._lease.release()
        finally:
            if self._sink is not None:
                self._sink.close()
            self._stores.discard_if_owned()
            self._session.close(abandon=abandon_session)

    @property
    def _store(self) -> CheckpointStore:
        """The checkpoint store, opened (and created when missing) on first use."""
        return self._stores.store

    @property
    def started_own_session(self) -> bool:
        """Whether this pipeline started a Spark session of its own (a batch on Spark, or about to be)."""
        return self._session.started_own

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
        try:
            return self.config.sink_target.normalized()
        except ConfigError:
            if self._sink is None:
                raise
            return self.config.sink_url.strip()

    @property
    def sink(self) -> Sink:
        if self._sink is None:
            self._sink = open_sink(self.config.sink_target, consumer=self.consumer, table=self.config.table)
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
            if once or not (outcome.completed or outcome.limited):
                break
        return outcomes

    def run_batch(self) -> BatchOutcome | None:
        """Deliver the in-flight batch, or plan and deliver the next one; None when caught up."""
        started = time.monotonic()
        # renewed when a third of its ttl has passed, not on every poll: a write per poll of every
        # table serialized `serve`'s tables on a SQLite store (R33). A run that took the consumer
        # over is still refused at the first write (begin_batch, commit_chunk fence by owner).
        self._renew_lease_if_due()
        # the checkpoint before the table: the table then holds every snapshot its cursor names. Read
        # the other way round, a run that lost its lease unawares (cut off from the store, healed)
        # saw the new holder's cursor past the metadata it had loaded and took it for expired
        stored = self._store.load(self.consumer)
        try:
            table = self._load_table()
        except RefNotFoundError as exc:
            if stored is None or stored.inflight is None:
                raise branch_dropped(self.config, stored) from exc
            table = self.table_as_is()  # a batch written ahead needs no branch: it is finished first
        check_row_lineage(table, self.config.with_row_lineage)
        checkpoint = stored or self._next.create_consumer(table)
        resumed = checkpoint.inflight is not None
        planning_seconds = 0.0
        if checkpoint.inflight is not None:
            engine = self._next.engines.for_resumed(checkpoint.inflight.batch.splits, checkpoint.inflight.batch.shape)
        else:
            plan = self._next.plan(table, checkpoint)
            planning_seconds = time.monotonic() - started
            if plan is None:
                return None
            engine = self._next.engines.for_plan(plan.splits, net=self.config.net)
            ahead = self._next.to_write_ahead(table, checkpoint, plan, local=engine.local)
            self._lease.check_before("batch's write-ahead")
            self._store.begin_batch(self.consumer, ahead, owner=self._owner)
            loaded = self._store.load(self.consumer)
            assert loaded is not None and loaded.inflight is not None
            checkpoint = loaded
        inflight = checkpoint.inflight
        assert inflight is not None
        if not engine.local:
            self._session.start()  # the JVM starts while the sink's batch preparation runs
        tally = Tally()
        # a batch that may use Spark (its reads, or a sink's Spark tasks) keeps a shared session up
        with self._session.held(not engine.local or isinstance(self.sink, SparkTaskSink)):
            completed = self._delivery().deliver(table, inflight, tally, engine)
        _hand_back_memory(engine, tally)
        if completed:
            self._lease.check_before("batch's commit")
            self._store.finish_batch(self.consumer, inflight.batch.batch_id, owner=self._owner)
            if self.config.protect_cursor:
                keep_cursor_tag(self.table_as_is(), self.consumer, inflight.batch.to_snapshot_inclusive)
        batch = inflight.batch
        outcome = batch_outcome(
            batch,
            tally,
            planning_seconds=planning_seconds,
            batch_seconds=time.monotonic() - started,
            resumed=resumed,
            completed=completed,
            schema_id=batch_schema_id(table, batch),
            sink_duplicate_keys=self._new_sink_duplicates(),
            engine=engine.engine,
            limited=not completed and not self._stop.is_set(),
        )
        if self._on_batch is not None:
            self._on_batch(outcome)
        return outcome

    # the table and the lease -------------------------------------------------------------
    def _load_table(self) -> Table:
        """The table as seen from the followed branch (its current snapshot is the branch's head)."""
        return self._next.on_branch(self.table_as_is())

    def table_as_is(self) -> Table:
        """The table as the catalog has it now, from the pipeline's catalog (opened on first use);
        the one to write metadata through (the tag of --protect-cursor)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.config.catalog)
        return load_table(self._catalog, self.config.table)

    def keep_lease(self) -> None:
        """Renew the lease if a third of its TTL passed: `serve` keeps an idle consumer's lease between cycles."""
        self._renew_lease_if_due()

    def _renew_lease_if_due(self) -> None:
        self._lease.renew_if_due()


def _hand_back_memory(engine: EngineChoice, tally: Tally) -> None:
    """A big batch read in this process leaves its peak in Arrow's pool; a long-lived `serve` hands it back."""
    if engine.local and tally.bytes_read >= RELEASE_AFTER_BYTES:
        pa.default_memory_pool().release_unused()
