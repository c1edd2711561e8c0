"""Planning a consumer's next batch from its cursor, and recovering a cursor that was lost.

A batch runs from the stored cursor (exclusive) to at most `--max-snapshots-per-batch` snapshots
later and never spans a schema change. A cursor whose snapshot is gone (expired, rolled back) is
recovered by --on-missing-cursor: a repair batch (the net change by a direct diff), a full read,
or a new cursor; the recovered cursor is only ever stored by the batch written ahead from the
stored one (compare-and-swap), so a run that fails first leaves the consumer as it found it.
Nothing here reads a row: the plan is the pipeline's to write ahead and deliver.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from pyiceberg.table import Table

from icetail.monitor.engine.batch_engine import BatchEngines
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.sessions import PipelineSession
from icetail.monitor.engine.start_mode import StartMode, parse_start
from icetail.monitor.engine.startup import DIFF, CursorProblem, cursor_problem, initial_cursor, recovery_for
from icetail.monitor.engine.store_handle import StoreHandle
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import ChangePlan, Planner, same_schema_prefix
from icetail.monitor.planning.refs import table_on_branch
from icetail.state.checkpoint import BatchShape, Checkpoint, Cursor, InflightBatch


class NextBatch:
    """Plans `config`'s consumer's batches; `session` is started as soon as a batch is known to exist
    and its snapshots' summaries say it is too big for this process (`engines`, the consumer's
    engine setting, decides each batch's engine).

    Holds the planner (its manifest cache lives across batches) and whether the next batch is a
    full read (--start full, or a lost cursor recovered by a full read).
    """

    def __init__(
        self,
        config: PipelineConfig,
        stores: StoreHandle,
        owner: str,
        session: PipelineSession,
        *,
        share_cache: bool,
    ) -> None:
        self._config = config
        self._consumer = config.consumer_id
        self._stores = stores
        self._owner = owner
        self._session = session
        # which engine reads each batch (batch_engine.py): a given session or spark-submit means Spark
        self.engines = BatchEngines.of(config.engine, config.local_max_bytes, spark_given=session.spark_given)
        # serve's pipelines plan from one process-wide manifest cache (its bound is the process's)
        self._share_manifest_cache = share_cache
        self._planner: Planner | None = None
        self._full_next = False

    def on_branch(self, table_as_is: Table) -> Table:
        """The table as seen from the followed branch (its current snapshot is the branch's head)."""
        table = table_on_branch(table_as_is, self._config.branch)
        if self._planner is None:
            self._planner = Planner(
                table,
                self._config.target_split_bytes,
                branch=self._config.branch,
                manifest_cache_entries=self._config.manifest_cache_entries,
                share_manifest_cache=self._share_manifest_cache,
            )
        else:
            self._planner.refresh(table)
        return table

    def create_consumer(self, table: Table) -> Checkpoint:
        mode = parse_start(self._config.start)
        cursor = initial_cursor(table.metadata, mode, self._config.table)
        self._full_next = mode.reads_full_snapshot
        # the sink is recorded once it opened (open), so a sink that fails to open is never recorded
        return self._stores.store.ensure_consumer(
            self._consumer, self._config.catalog, self._config.table, cursor, None, self._config.branch
        )

    def plan(self, table: Table, checkpoint: Checkpoint) -> ChangePlan | None:
        """The next batch from the stored cursor, or None when there is nothing to deliver."""
        assert self._planner is not None
        config = self._config
        metadata = table.metadata
        cursor = checkpoint.cursor
        full = self._full_next or (config.start == "full" and checkpoint.generation == 0)
        # a full read from before the first snapshot needs no history: an expired one is no problem
        problem = None if full and cursor.snapshot_id is None else cursor_problem(metadata, cursor, config.branch)
        if problem is not None:
            action = recovery_for(problem, config.on_missing_cursor, config.protect_cursor)
            if action == DIFF and problem.current_snapshot_id is not None and problem.cursor_snapshot_id is not None:
                # repair: the net change from the (kept) cursor snapshot to the current one, one batch;
                # its size is known only once planned
                self._start_spark_if(not self.engines.of_full(table, problem.current_snapshot_id).local)
                return self._planner.plan_direct(
                    problem.cursor_snapshot_id, problem.current_snapshot_id, ordinal_base=self._next_ordinal(cursor)
                )
            cursor = self._recover_cursor(table, problem, action)
        current = metadata.current_snapshot_id
        if current is None or current == cursor.snapshot_id:
            if problem is not None:  # recovered onto the current snapshot (latest): a success, so it is stored
                self._stores.store.reset_cursor(self._consumer, cursor, owner=self._owner)
            return None
        base = self._next_ordinal(cursor) if problem is None else 0
        full = self._full_next or full
        if cursor.snapshot_id is None and full:
            self._start_spark_if(not self.engines.of_full(table, current).local)
            self._full_next = False
            plan = self._planner.plan_full(current, ordinal_base=base)
            # the batch starts where the stored cursor is (CAS), even when that snapshot is gone
            return replace(plan, from_snapshot_id_exclusive=checkpoint.cursor.snapshot_id)
        # a batch never spans a schema change: it ends before the first snapshot of a new schema
        chain = same_schema_prefix(metadata, snapshots_between(metadata, cursor.snapshot_id, current))
        if config.max_snapshots_per_batch is not None:
            chain = chain[: config.max_snapshots_per_batch]
        to_snapshot = chain[-1].snapshot_id
        # a batch its summaries say is big: the JVM starts while it is planned and begun
        self._start_spark_if(not self.engines.estimate(table, [s.snapshot_id for s in chain]).local)
        plan = self._planner.plan(cursor.snapshot_id, to_snapshot, ordinal_base=base)
        if problem is not None:
            # the recovered cursor is stored only by the batch written ahead from the stored one (CAS):
            # a run that fails before that leaves the consumer as it found it
            return replace(plan, from_snapshot_id_exclusive=checkpoint.cursor.snapshot_id)
        return plan

    def _start_spark_if(self, needed: bool) -> None:
        if needed:
            self._session.start()

    def _next_ordinal(self, cursor: Cursor) -> int:
        """`_change_ordinal` of the next snapshot: ordinals count from the consumer's (re)start.

        The newest finished batch records its first ordinal and snapshot count (BatchShape); after
        a reset (the cursor is not where that batch ended) the count starts again at 0.
        """
        history = self._stores.store.history(self._consumer, 1)
        if not history or history[0].to_snapshot_inclusive != cursor.snapshot_id:
            return 0
        return history[0].shape.next_ordinal

    def _recover_cursor(self, table: Table, problem: CursorProblem, policy: str) -> Cursor:
        """The cursor `policy` continues from, in memory only: nothing is stored until the batch
        from the stored cursor is written ahead (or, with nothing to deliver, the run succeeded)."""
        if policy == "fail":
            raise problem.error(self._consumer, self._config.state_url)
        if policy == "full":
            # the full read is written ahead as the next batch, from the lost cursor, so a crash
            # before it is written simply repeats this decision
            self._full_next = True
            return Cursor.before_first_snapshot()
        cursor = initial_cursor(table.metadata, StartMode(policy), self._config.table)
        unusable = cursor_problem(table.metadata, cursor, self._config.branch)
        if unusable is not None:  # earliest, when the oldest history expired too
            error = unusable.error(self._consumer, self._config.state_url)
            raise type(error)(f"--on-missing-cursor {policy}: {error}")
        return cursor

    def to_write_ahead(self, table: Table, checkpoint: Checkpoint, plan: ChangePlan, *, local: bool) -> InflightBatch:
        """The planned batch as it is written ahead: its range, its ordered splits and its shape
        (`local`: read in this process, so reconciled whole: no partitions, which are Spark tasks)."""
        to_snapshot = table.metadata.snapshot_by_id(plan.to_snapshot_id_inclusive or -1)
        return InflightBatch(
            batch_id=self._new_batch_id(checkpoint, plan, local=local),
            from_snapshot_exclusive=plan.from_snapshot_id_exclusive,
            to_snapshot_inclusive=plan.to_snapshot_id_inclusive,  # type: ignore[arg-type]
            to_timestamp_ms=to_snapshot.timestamp_ms if to_snapshot else 0,
            splits=plan.splits,
            shape=self._shape_of(checkpoint, plan, local=local),
        )

    def _shape_of(self, checkpoint: Checkpoint, plan: ChangePlan, *, local: bool) -> BatchShape:
        """Stored with the batch: a resumed batch cuts chunks exactly as before, the next one's ordinals follow."""
        first = plan.commits[0].ordinal if plan.commits else self._next_ordinal(checkpoint.cursor)
        return BatchShape(
            self._config.chunk_rows or None,
            first,
            len(plan.commits),
            plan.collapsed,
            net=self._config.net,
            schema_id=plan.schema_id,
            reconcile_partition_bytes=None if local else self._reconcile_partition_bytes(),
            net_partitioned=self._config.net and not local,
        )

    def _reconcile_partition_bytes(self) -> int | None:
        """Stored with the batch: None on Spark Connect, which has no RDDs to shuffle with."""
        return None if self._session.on_connect() else self._config.reconcile_partition_bytes or None

    def _new_batch_id(self, checkpoint: Checkpoint, plan: ChangePlan, *, local: bool) -> str:
        """A label for people and sink file names; the batch's shape is read from BatchShape, never from here.

        It repeats the shape (`-c<chunk rows>-o<first ordinal>-n<snapshots>`, `-d1` for a repair
        batch) so that sink files and logs show it (docs/delivery.md).
        """
        shape = self._shape_of(checkpoint, plan, local=local)
        return (
            f"b{checkpoint.generation + 1:06d}-{uuid.uuid4().hex[:8]}"
            f"-c{shape.chunk_rows or 0}-o{shape.first_ordinal}-n{shape.snapshot_count}"
            + ("-d1" if shape.collapsed else "")
            + ("-net" if shape.net else "")
        )
