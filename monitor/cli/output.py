"""Where `icetail changes` writes: one parquet file, JSON lines, or stdout; never a partial file.

Files are written under a temporary name beside the target and renamed into place only when
every row is written, so a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from icetail.kernel.errors import ConfigError
from icetail.sinks.factory import remote_scheme
from icetail.sinks.jsonl_encoding import write_jsonl_to


def write_jsonl(batches: Iterable[pa.RecordBatch], stream: IO[str]) -> int:
    """Strict JSON lines, encoded as the JSONL sink encodes them (one encoding for every JSON output)."""
    return sum(write_jsonl_to(stream, batch) for batch in batches)


def check_output_path(path: str) -> None:
    """Refuse an output path we cannot write, before any work is done."""
    remote = remote_scheme(path)
    if remote is not None:
        raise ConfigError(
            f"--output {path!r} is a {remote}:// URL, but icetail changes writes a local file only; "
            "give a local or mounted path, or - for stdout"
        )
    if path != "-" and not path.endswith((".parquet", ".jsonl")):
        raise ConfigError(f"--output {path!r} must end in .parquet or .jsonl, or be - for stdout")


def write_output(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """Write change batches to `path` (`.parquet`, `.jsonl` or `-`); returns the row count."""
    check_output_path(path)
    if path == "-":
        rows = write_jsonl(batches, sys.stdout)
        sys.stdout.flush()
        return rows
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"--output directory {directory} does not exist; create it first")
    fd, tmp = tempfile.mkstemp(prefix=".icetail-", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        if path.endswith(".parquet"):
            rows = 0
            with pq.ParquetWriter(tmp, schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
                    rows += batch.num_rows
        else:
            with open(tmp, "w", encoding="utf-8") as stream:
                rows = write_jsonl(batches, stream)
        os.replace(tmp, path)
        return rows
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
