"""Where `icetail changes` writes: one parquet file, JSON lines, or stdout; never a partial file.

Files are written under a temporary name beside the target and renamed into place only when
every row is written, so a failure leaves nothing behind. The batches are read ahead on a
thread while the writer encodes (`prefetch.Prefetched`). Parquet files get pyarrow's defaults
(snappy, dictionary pages, statistics), with row groups of up to ROW_GROUP_ROWS rows or
ROW_GROUP_BYTES of Arrow data, whichever comes first, however small the change batches are.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from icetail.kernel.errors import ConfigError
from icetail.kernel.files import publishable_mode
from icetail.monitor.cli.output_checks import check_output_path
from icetail.monitor.cli.prefetch import Prefetched
from icetail.sinks.files.jsonl_encoding import write_jsonl_to

ROW_GROUP_ROWS = 1024 * 1024  # pyarrow's own default for write_table
ROW_GROUP_BYTES = 64 * 1024 * 1024  # bounds the driver's memory for wide rows


def write_jsonl(batches: Iterable[pa.RecordBatch], stream: IO[str]) -> int:
    """Strict JSON lines, encoded as the JSONL sink encodes them (one encoding for every JSON output)."""
    return write_jsonl_to(stream, batches)  # encoded a few slices ahead, across batches


def write_output(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """Write change batches to `path` (`.parquet`, `.jsonl` or `-`); returns the row count."""
    check_output_path(path)
    with Prefetched(batches) as ahead:
        return _write(path, schema, ahead)


def _write(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    if path == "-":
        rows = write_jsonl(batches, sys.stdout)
        sys.stdout.flush()
        return rows
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"--output directory {directory} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=".icetail-", suffix=".tmp", dir=directory)
    try:
        publishable_mode(fd)  # mkstemp's 0600 would outlive the rename: the umask decides, as for run's sinks
    finally:
        os.close(fd)
    try:
        if path.endswith(".parquet"):
            rows = 0
            with pq.ParquetWriter(tmp, schema) as writer:
                for group in row_groups(batches):
                    writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
                    rows += group.num_rows
        else:
            with open(tmp, "w", encoding="utf-8") as stream:
                rows = write_jsonl(batches, stream)
        os.replace(tmp, path)
        return rows
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def row_groups(
    batches: Iterable[pa.RecordBatch],
    max_rows: int = ROW_GROUP_ROWS,
    max_bytes: int = ROW_GROUP_BYTES,
) -> Iterator[pa.Table]:
    """The batches regrouped into tables of at most `max_rows` rows, each <= `max_bytes` unless one batch is.

    A change batch is one chunk of one split (a row group, or what is left of it after deletes),
    so written one by one, a 10% delete gave row groups of ~10k rows.
    """
    held: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if held and (rows + batch.num_rows > max_rows or size + batch.nbytes > max_bytes):
            yield pa.Table.from_batches(held)
            held, rows, size = [], 0, 0
        held.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
    if held:
        yield pa.Table.from_batches(held)
