"""Experiment: a PySpark daemon for icetail's workers, selected with
`spark.python.daemon.module=bench.cases.fastdaemon` (the repository root must be on PYTHONPATH).

* P1a: `zipimporter.invalidate_caches` becomes a no-op. PySpark calls `importlib.invalidate_caches()`
  for every task, which re-reads the central directory of `pyspark.zip` and the py4j zip once per
  zipimporter (about 70 ms a task on the benchmark machine); those archives never change while
  a worker lives.
* P2 (only with ICETAIL_BENCH_FAST_METADATA=1): `icetail.reader.split.metadata_columns.with_metadata` builds its
  constant columns with `pa.repeat` instead of Python lists of n items.
* P3 (only with ICETAIL_BENCH_FAST_INSERTS=1): `icetail.reader.split.read._changes` skips the masks, the
  two filters and the final concatenation when every row of the chunk is an INSERT (an ADDED
  file with no deletes), projecting and tagging the batch as it is.

Patches apply in the daemon before it forks, so every worker inherits them.
"""

from __future__ import annotations

import os
import zipimport

zipimport.zipimporter.invalidate_caches = lambda self: None  # type: ignore[method-assign]

if os.environ.get("ICETAIL_BENCH_FAST_METADATA") == "1":
    import pyarrow as pa

    from icetail.reader.split import metadata_columns
    from icetail.reader.split import read as split_reader

    def _with_metadata(rows, change_type, commit, with_schema_id=False):  # type: ignore[no-untyped-def]
        n = rows.num_rows
        extra = [
            pa.repeat(pa.scalar(change_type.value, pa.string()), n),
            pa.repeat(pa.scalar(commit.ordinal, pa.int32()), n),
            pa.repeat(pa.scalar(commit.snapshot_id, pa.int64()), n),
            pa.repeat(pa.scalar(commit.timestamp_ms * 1000, pa.timestamp("us", tz="UTC")), n),
        ]
        schema = metadata_columns.change_schema(rows.schema)
        return pa.RecordBatch.from_arrays(list(rows.columns) + extra, schema=schema)

    metadata_columns.with_metadata = _with_metadata
    split_reader.with_metadata = _with_metadata  # the name split_reader imported

if os.environ.get("ICETAIL_BENCH_FAST_INSERTS") == "1":
    from icetail.kernel.model import ChangeType
    from icetail.reader.split import read as _sr

    _original_changes = _sr._changes
    # newer readers return (batch, rows hidden by deletes): keep whichever shape the reader has
    _returns_pair = "tuple" in str(_original_changes.__annotations__.get("return", ""))

    def _changes(rows, lo, hi, before, after, kind, schema_of_file, output_schema, key_schema, fv, split):  # type: ignore[no-untyped-def]
        if before is None and after is not None and not len(after.positions) and not after.equality and rows.num_rows:
            batches = rows.to_batches()
            batch = batches[0] if len(batches) == 1 else rows.combine_chunks().to_batches()[0]
            projected = _sr.project(batch, schema_of_file, output_schema, fv).cast(_sr.arrow_schema(output_schema))
            out = _sr.with_metadata(projected, ChangeType.INSERT, split.task.commit)
            return (out, 0) if _returns_pair else out
        return _original_changes(
            rows, lo, hi, before, after, kind, schema_of_file, output_schema, key_schema, fv, split
        )

    _sr._changes = _changes

from pyspark import daemon  # noqa: E402

if __name__ == "__main__":
    daemon.manager()
