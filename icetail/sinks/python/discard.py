"""A stager that reads and drops: the read path's cost without any sink's.

Spark's `noop` data source does the same for DataFrames. It exists to measure icetail's read
(bench/) against readers that also discard their rows, and to count a range's changes without
delivering them; it is never a pipeline sink, since a checkpoint must not pass rows nobody got.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from icetail.sinks.base import ChunkKey


@dataclass(frozen=True)
class DiscardStager:
    """Runs in Spark tasks: drops the chunk's rows; only their counts reach the driver."""

    def stage(self, key: ChunkKey, rows: pa.Table) -> str:
        return ""
