"""A one-line progress bar on stderr for long `changes`/`run` work, only on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # the progress line is shown before the read path loads
    from icetail.monitor.engine.pipeline import BatchOutcome
    from icetail.reader.split.read import Chunk


class Progress:
    """Counts finished splits and rows; redraws at most a few times a second; silent off a TTY."""

    def __init__(self, total_splits: int | None, *, label: str = "reading", stream: TextIO | None = None) -> None:
        """`total_splits` None: a running count without a bar (the total is not known up front)."""
        self._stream = stream or sys.stderr
        self.enabled = self._stream.isatty() and total_splits != 0
        self._total = total_splits
        self._label = label
        self._splits = 0
        self._rows = 0
        self._drawn_at = 0.0

    def __call__(self, chunk: Chunk) -> None:
        self._splits += 1 if chunk.done else 0
        self._rows += chunk.row_count
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at > 0.2 or self._splits == self._total):
            self._drawn_at = now
            if self._total:
                filled = 30 * self._splits // self._total
                done = f"[{'#' * filled}{'.' * (30 - filled)}] {self._splits}/{self._total} splits"
            else:
                done = f"{self._splits} splits"
            self._stream.write(f"\r{self._label} {done}  {self._rows:,} change rows")
            self._stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn_at:
            self._stream.write("\n")
            self._stream.flush()


def describe(outcome: BatchOutcome) -> str:
    rows = ", ".join(f"{k} {v}" for k, v in sorted(outcome.rows_by_change_type.items())) or "no rows"
    state = "" if outcome.completed else " (stopped; resumes on the next run)"
    if outcome.limited:
        state = " (its row or byte bound reached; the next batch resumes it)"
    collapsed = " collapsed history (repair by a direct diff)" if outcome.collapsed else ""
    mismatches = (
        f", {outcome.check_mismatches} summary check mismatch(es) delivered under --verify warn (logged above)"
        if outcome.check_mismatches
        else ""
    )
    return (
        f"batch {outcome.batch_id}: snapshots ({outcome.from_snapshot_exclusive}, {outcome.to_snapshot_inclusive}]"
        f" schema {outcome.schema_id}{collapsed}{' resumed' if outcome.resumed else ''}: "
        f"{rows} in {outcome.chunks} chunks, "
        f"{outcome.batch_seconds:.2f}s {'in process' if outcome.engine == 'local' else 'on Spark'}{state}{mismatches}"
    )
