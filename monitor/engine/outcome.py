"""What one batch did (`BatchOutcome`): the frozen report of a batch, made from its counters at its end.

The pipeline hands it to its `on_batch` hook (`serve`'s metrics and logs, the command line's
progress) and returns it from `run_batch`; an interrupted batch reports what it delivered so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from icetail.monitor.engine.delivery.context import Tally
from icetail.state.checkpoint import InflightBatch


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
    engine: str = "spark"  # where its splits were read: `local` (this process) or `spark`
    limited: bool = False  # ended at --max-rows-per-batch / --max-bytes-per-batch: the next batch resumes it

    @property
    def rows(self) -> int:
        return sum(self.rows_by_change_type.values())


def batch_outcome(
    batch: InflightBatch,
    tally: Tally,
    *,
    planning_seconds: float,
    batch_seconds: float,
    resumed: bool,
    completed: bool,
    schema_id: int | None,
    sink_duplicate_keys: int,
    engine: str,
    limited: bool = False,
) -> BatchOutcome:
    """The batch's outcome: its range and files from what was written ahead, its rows from `tally`,
    how it ran from the pipeline."""
    return BatchOutcome(
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
        batch_seconds=batch_seconds,
        resumed=resumed,
        completed=completed,
        collapsed=batch.shape.collapsed,
        snapshots_checked=tally.snapshots_checked,
        check_mismatches=tally.check_mismatches,
        schema_id=schema_id,
        sink_duplicate_keys=sink_duplicate_keys,
        engine=engine,
        limited=limited,
    )
