"""A test seam: the icetail data source whose stream stops mid-batch and waits to be killed.

When ICETAIL_TEST_PAUSE_SNAPSHOT names a snapshot, the task reading that snapshot's rows hands
its first batch to Spark, creates ICETAIL_TEST_PAUSE_FILE and blocks forever; the test SIGKILLs
the process group once the file exists. Without the variable it is the plain data source.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from icetail.monitor.engine.spark_source.options import parse_stream_options
from icetail.monitor.engine.spark_source.source import ChangePartition, ChangesDataSource, ChangesStreamReader


class KillableStreamReader(ChangesStreamReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        pause_at = os.environ.get("ICETAIL_TEST_PAUSE_SNAPSHOT")
        splits = partition.spec.splits if isinstance(partition, ChangePartition) else ()
        snapshots = {split.task.commit.snapshot_id for split in splits}
        for batch in super().read(partition):
            yield batch
            if pause_at and int(pause_at) in snapshots:
                Path(os.environ["ICETAIL_TEST_PAUSE_FILE"]).write_text(str(os.getpid()))
                threading.Event().wait()  # until SIGKILL


class KillableChangesDataSource(ChangesDataSource):
    @classmethod
    def name(cls) -> str:
        return "icetail_killable"

    def streamReader(self, schema: StructType) -> Any:
        _, schema_id = self._pinned_values()
        return KillableStreamReader(parse_stream_options(self.options), schema_id, schema)
