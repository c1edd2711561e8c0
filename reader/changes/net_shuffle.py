"""A range's net changes folded in partitions, one Spark task each, instead of whole in the driver.

`NetChanges` (reader/changes/net.py) groups rows by content, pairs by key and, with row lineage, follows
rows by `_row_id`. Each rule only looks at rows that share what it groups by, so the range's
change rows are cut by a stable hash (reader/changes/stable_hash.py) of that and every partition is
folded on its own, in plan order:
- without row lineage: one shuffle by the key columns (the identifier columns, else every data
  column): identical rows have identical keys, so the count and the update pairing both see
  whole groups. Each partition is `NetChanges` of its rows, fed snapshot by snapshot as the
  driver feeds it.
- with row lineage (v3) the rules chain, so the rows go through four stages, each a shuffle:
  A by `_row_id` settles each snapshot's lineage pairs; B by key takes the rows A leaves (and
  those without a row id) through the content rules of their snapshots (carry-over pairs, the
  count of rows followed by no row id); C by `_row_id` reduces each row id to its first and
  last change; D by key cancels identical net DELETE/INSERT rows and pairs the rest by key,
  as `NetChanges.result` does. D's partitions are the outputs.
One rule of the driver fold crosses row ids: a carry-over by content of a row already changed in
the range, rewritten under a new row id (a writer that does not keep lineage), moves that row
to the new id (`NetChanges._follow_lost_lineage`). Stage C sees when that happens; the fold is
then not exact and `NetFoldNotExact` is raised before any output is delivered: the caller folds
the range in the driver instead (the same choice on every replay of the batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from icetail.reader.changes.net_shuffle_tasks import lineage_stage, net_output_task, net_read_task
from icetail.reader.changes.shuffle import ShuffleOutput, identity_partitioner, output_waves, read_task_runs
from icetail.reader.changes.stable_hash import PARTITION_HASH_VERSION
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.split.context import ReadContext


class NetFoldNotExact(Exception):  # noqa: N818 - a signal to fold in the driver, not an error
    """A partitioned net fold would differ from the driver's (lost lineage of a changed row)."""


@dataclass(frozen=True)
class NetShuffleSpec:
    """One range's partitioned net fold: everything its tasks need, all of it picklable."""

    requests: tuple[SplitRequest, ...]  # every split of the batch, each read from its first row
    split_indexes: tuple[int, ...]  # each request's position in its batch: the rows' plan order
    partitions: int  # P: outputs, and partitions of every stage
    read_schema: pa.Schema  # the rows as read (with the lineage columns when the fold reads them)
    key_columns: tuple[str, ...]  # hashed: the identifier columns, else every data column
    pair_columns: tuple[str, ...]  # update pairing (net_key_columns): the identifier columns or none
    whole_snapshots: frozenset[int]  # snapshots that may both delete and insert (carry-overs)
    row_lineage: bool  # rows are followed by `_row_id`: four stages
    output_lineage: bool  # the net rows keep the lineage columns
    first_output: int = 0  # outputs below this were delivered before
    chunk_rows: int | None = None

    @property
    def outputs(self) -> int:
        return self.partitions

    @property
    def fingerprint(self) -> str:
        """What decides which rows each output holds: a resumed batch must be cut the same way."""
        return (
            f"net;h{PARTITION_HASH_VERSION};p{self.partitions};lineage={int(self.row_lineage)};"
            f"keys={','.join(self.key_columns)}"
        )


def net_outputs(
    spark: Any,
    context: ReadContext,
    spec: NetShuffleSpec,
    *,
    wave_outputs: int | None = None,
    heartbeat: Callable[[], bool] | None = None,
) -> Iterator[ShuffleOutput]:
    """Outputs [spec.first_output, spec.outputs) in index order, each one partition's net rows.

    A task's read error raises first, and so does NetFoldNotExact (its flag travels with output
    `first_output`, which is in the first wave), before anything is yielded.
    """
    sc = spark.sparkContext
    parallelism = int(sc.defaultParallelism)
    runs = read_task_runs(spec.requests, spec.split_indexes, max(2 * parallelism, spec.partitions))
    records = sc.parallelize(runs, max(1, len(runs))).mapPartitions(lambda part: net_read_task(context, spec, part))
    records = records.partitionBy(spec.partitions, identity_partitioner)
    if spec.row_lineage:
        for stage in ("A", "B", "C"):
            records = records.mapPartitionsWithIndex(
                lambda p, part, stage=stage: lineage_stage(spec, stage, p, part)
            ).partitionBy(spec.partitions, identity_partitioner)
    outputs = records.mapPartitionsWithIndex(lambda i, part: net_output_task(spec, i, part))
    wave = max(1, wave_outputs or 2 * parallelism)
    for output in output_waves(spark, outputs, range(spec.first_output, spec.outputs), wave, heartbeat):
        if output.not_exact is not None:
            raise NetFoldNotExact(output.not_exact)
        yield output
