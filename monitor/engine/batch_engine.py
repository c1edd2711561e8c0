"""Which engine reads a batch of `run` and `serve`: decided per batch, as `changes` decides per range.

`auto` reads a batch in this process when its plan reads at most `local_max_bytes` of data and
delete files and what it holds in memory to reconcile (a snapshot paired or cleaned whole, a
`--net` fold) is estimated at most that too; anything bigger, or a caller that gave a session
(the Spark data source, spark-submit), reads on Spark. Either engine yields the same chunks in the
same order (reader/local.py), so a batch written ahead by one may be resumed by the other; a
batch written ahead for this process is stored with no reconcile partitions (the partitions are
Spark tasks), so it never needs Spark.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.table import Table

from icetail.kernel.model import ChangeSplit
from icetail.monitor.engine.engine_choice import (
    AUTO,
    SPARK,
    EngineChoice,
    choose_engine,
    local_max_bytes,
    planned_bytes,
    size_text,
    summary_bytes,
)
from icetail.monitor.planning.summary_rules import summary_of
from icetail.reader.changes.partitions import net_partitioned, partitioned_snapshots
from icetail.reader.changes.release import snapshots_needing_reconcile
from icetail.state.checkpoint import BatchShape

# Arrow holds a parquet file's rows in about this many times its bytes (compressed pages decoded);
# a reconciled snapshot is held whole in memory, so its estimate is its files' bytes times this.
DECODED_BYTES_PER_FILE_BYTE = 4


@dataclass(frozen=True)
class BatchEngines:
    """The engine setting of one consumer (`engine`: auto | spark | local) and its byte bound."""

    engine: str
    max_bytes: int
    spark_given: bool

    @classmethod
    def of(cls, engine: str, max_bytes: int | None, *, spark_given: bool) -> BatchEngines:
        """`max_bytes` None: ICETAIL_LOCAL_MAX_BYTES, else the default; ConfigError for a bad one."""
        return cls(engine, local_max_bytes(max_bytes), spark_given)

    @property
    def estimate_is_spark(self) -> bool:
        """Whether even an empty batch would read on Spark (a bound of 0, SPARK_REMOTE)."""
        return not choose_engine(self.engine, 0, self.max_bytes, spark_given=self.spark_given).local

    def estimate(self, table: Table, snapshot_ids: Iterable[int]) -> EngineChoice:
        """From the snapshots' summaries alone (before planning): whether Spark should start now."""
        return choose_engine(
            self.engine, summary_bytes(table, snapshot_ids), self.max_bytes, spark_given=self.spark_given
        )

    def of_full(self, table: Table, snapshot_id: int) -> EngineChoice:
        """For a read of a whole snapshot (a full start, a repair's diff to it): from its summary's
        total size, before planning."""
        summary = summary_of(table.metadata.snapshot_by_id(snapshot_id))
        whole = None if summary is None else summary.get("total-files-size")
        read_bytes = None if whole is None else int(whole)
        return choose_engine(self.engine, read_bytes, self.max_bytes, spark_given=self.spark_given)

    def for_plan(self, splits: Sequence[ChangeSplit], *, net: bool) -> EngineChoice:
        """The engine of a batch about to be written ahead."""
        choice = choose_engine(self.engine, planned_bytes(splits), self.max_bytes, spark_given=self.spark_given)
        if choice.local and self.engine == AUTO:
            held = held_bytes(splits, net=net)
            if held > self.max_bytes:
                return EngineChoice(
                    SPARK,
                    f"holds about {size_text(held)} to reconcile, "
                    f"more than --local-max-bytes {size_text(self.max_bytes)}",
                )
        return choice

    def for_resumed(self, splits: Sequence[ChangeSplit], shape: BatchShape) -> EngineChoice:
        """The engine of a batch written ahead earlier: as a new one would get, except that a batch
        written for Spark whose snapshots are cut in reconcile partitions stays there."""
        if has_partitions(splits, shape):
            return EngineChoice(SPARK, "written ahead with reconcile partitions (Spark tasks)")
        return self.for_plan(splits, net=shape.net)


def always_on_spark(engine: str, max_bytes: int | None) -> bool:
    """Whether every batch of a consumer with these settings reads on Spark (`spark`, or `auto` with a
    bound of 0 or a Spark Connect server): `serve` then starts its session at once and is ready once
    it is up, as before batches could read in process."""
    if engine == SPARK:
        return True
    return engine == AUTO and BatchEngines.of(engine, max_bytes, spark_given=False).estimate_is_spark


def held_bytes(splits: Sequence[ChangeSplit], *, net: bool) -> int:
    """The estimated decoded bytes held at once to reconcile: the biggest snapshot that is reconciled
    whole, or the whole batch for a `--net` fold (conservative: every snapshot that can hold both
    deletes and inserts counts, whether or not its rows get paired)."""
    if net:
        return _decoded(splits)
    reconciled = snapshots_needing_reconcile(s.task for s in splits)
    per_snapshot: Counter[int] = Counter()
    for split in splits:
        if split.task.commit.snapshot_id in reconciled:
            per_snapshot[split.task.commit.snapshot_id] += _split_bytes(split)
    return max(per_snapshot.values(), default=0) * DECODED_BYTES_PER_FILE_BYTE


def has_partitions(splits: Sequence[ChangeSplit], shape: BatchShape) -> bool:
    """Whether the stored batch cuts a snapshot (or its net fold) in reconcile partitions."""
    if shape.reconcile_partition_bytes is None:
        return False
    if shape.net:
        return shape.net_partitioned and net_partitioned(splits, shape.reconcile_partition_bytes) is not None
    reconciled = snapshots_needing_reconcile(s.task for s in splits)
    return bool(partitioned_snapshots(splits, reconciled, shape.reconcile_partition_bytes))


def _decoded(splits: Sequence[ChangeSplit]) -> int:
    return sum(_split_bytes(s) for s in splits) * DECODED_BYTES_PER_FILE_BYTE


def _split_bytes(split: ChangeSplit) -> int:
    return split.estimated_bytes or split.task.data_file.file_size_in_bytes
