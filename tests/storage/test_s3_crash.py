"""Exactly once under SIGKILL, with the source table and the `parquet+s3://` sink both on S3.

`icetail run` (a child process: Python driver, Spark JVM, Python workers) is SIGKILLed by the
seeded schedule of tests/pipeline (`kill_schedule`: during start-up, planning, Spark's start,
inside a sink write, between a sink write and its offset commit, at random), then left to
finish. "A sink write began" is a new data object under the prefix, "landed" a new commit
record. After every run the committed chunks (those with a commit record) hold a sub-multiset
of the oracle's change stream and at least what the checkpoint says was committed; at the end
exactly the stream, compared as multisets of full rows.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs

from icetail.monitor.engine.api import read_changes
from icetail.sinks.files.object_store import COMMITTED_DIR
from tests.support.crash import assert_exactly_once_under_kills, kill_schedule
from tests.support.processes import child_env, icetail_command
from tests.support.s3 import MotoServer, S3Catalog
from tests.support.tables import build_mixed_table

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261122"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))


@dataclass(frozen=True)
class S3SinkSpec:
    """What crash_loop needs of a sink: its URL, progress probes and its committed rows."""

    url: str
    location: str  # BUCKET/PREFIX
    server: MotoServer
    kind: str = "parquet+s3"
    directory: None = None

    def _names(self, where: str) -> list[fs.FileInfo]:
        selector = fs.FileSelector(where, allow_not_found=True)
        return [i for i in self.server.fs().get_file_info(selector) if i.is_file]

    def committed_paths(self) -> list[str]:
        records = self._names(f"{self.location}/{COMMITTED_DIR}")
        return sorted(f"{self.location}/{Path(i.path).stem}.parquet" for i in records)

    def probe(self, kind: str) -> int:
        """started: data objects written (a task began the chunk); written: commit records."""
        if kind == "started":
            return len(self._names(self.location))
        return len(self._names(f"{self.location}/{COMMITTED_DIR}"))

    def read(self) -> pa.Table | None:
        paths = self.committed_paths()
        if not paths:
            return None
        dataset = ds.dataset(paths, filesystem=self.server.fs(), format="parquet")
        schema = pa.unify_schemas([f.physical_schema for f in dataset.get_fragments()], promote_options="permissive")
        return ds.dataset(paths, filesystem=self.server.fs(), format="parquet", schema=schema).to_table()

    def fingerprint(self) -> tuple[Any, ...]:
        infos = self._names(self.location) + self._names(f"{self.location}/{COMMITTED_DIR}")
        return tuple(sorted((i.path, i.size, i.mtime_ns) for i in infos))


def test_sigkill_into_parquet_s3_delivers_every_change_exactly_once(
    s3_catalog: S3Catalog, moto: MotoServer, spark: Any, tmp_path: Path, record_property: Any
) -> None:
    table = build_mixed_table(s3_catalog, "ns.events")  # type: ignore[arg-type]
    oracle = read_changes(table, spark=spark)
    bucket = f"crash-sink-{s3_catalog.bucket[-10:]}"
    moto.create_bucket(bucket)
    sink = S3SinkSpec(f"parquet+s3://{bucket}/cdc", f"{bucket}/cdc", moto)
    state_url = f"sqlite:///{tmp_path}/state.db"
    consumer = "crash-s3"
    env = {**child_env([s3_catalog], tmp_path / "spark"), **moto.aws_env()}  # type: ignore[list-item]
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", s3_catalog.name,
        "--table", "ns.events",
        "--state", state_url,
        "--sink", sink.url,
        "--consumer", consumer,
        "--until-caught-up",
        "--max-snapshots-per-batch", "2",
        "--chunk-rows", "100",
    ]  # fmt: skip
    assert_exactly_once_under_kills(
        cmd, env, state_url=state_url, consumer=consumer, sink=sink, expected_rows=oracle,
        current_snapshot_id=table.metadata.current_snapshot_id,
        schedule=kill_schedule(random.Random(f"{SEED}:parquet+s3"), KILLS), logs=tmp_path / "logs",
        label=f"seed {SEED}", record=record_property,
    )  # fmt: skip
