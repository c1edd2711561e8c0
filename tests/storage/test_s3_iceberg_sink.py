"""The `iceberg://` sink into a table whose warehouse is in S3, from a source table in S3.

Source and sink catalogs are pyiceberg SQL catalogs whose warehouses are buckets on the moto
server; the Spark tasks write the sink's data files to S3 with the sink table's FileIO
properties (`IcebergStager`), the driver commits them. Checked: `icetail run` delivers exactly
the oracle's change stream (multisets of full rows), in process and under the SIGKILL schedule
of tests/pipeline.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyarrow import fs

from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.api import read_changes
from tests.storage.test_s3_reading import _ordered
from tests.support.catalogs import catalogs_in_process
from tests.support.crash import assert_exactly_once_under_kills, kill_schedule
from tests.support.processes import child_env, icetail_command
from tests.support.s3 import MotoServer, S3Catalog, new_s3_catalog
from tests.support.tables import build_mixed_table

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261122"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))
SINK_IDENT = "cdc.events_changes"


def test_run_into_an_iceberg_table_on_s3_is_exact(
    s3_catalog: S3Catalog, moto: MotoServer, spark: Any, tmp_path: Path
) -> None:
    source = build_mixed_table(s3_catalog, "ns.mixed")  # type: ignore[arg-type]
    oracle = read_changes(source, spark=spark)
    sink_cat = new_s3_catalog(moto, tmp_path / "sinkcat", "s3sink")
    with catalogs_in_process(sink_cat):  # type: ignore[arg-type]
        args = [
            "run", "--catalog", "s3cat", "--table", "ns.mixed",
            "--state", f"sqlite:///{tmp_path}/state.db", "--sink", f"iceberg://s3sink/{SINK_IDENT}",
            "--consumer", "c1", "--until-caught-up", "--chunk-rows", "150", "--max-snapshots-per-batch", "3",
        ]  # fmt: skip
        assert cli_main(args) == 0
    sink = sink_cat.load(SINK_IDENT)
    assert sink.metadata_location.startswith(f"s3://{sink_cat.bucket}/")
    files = [t.file.file_path for t in sink.scan().plan_files()]
    assert files and all(f.startswith(f"s3://{sink_cat.bucket}/") for f in files)
    got = sink.scan().to_arrow()
    cols = [c for c in oracle.column_names if c != "_change_ordinal"]
    assert Counter(_ordered(got, cols)) == Counter(_ordered(oracle, cols))


@dataclass(frozen=True)
class S3IcebergSinkSpec:
    """What crash_loop needs of an Iceberg sink table on S3: URL, progress probes, committed rows."""

    url: str
    catalog: S3Catalog
    ident: str
    kind: str = "iceberg"
    directory: None = None

    def _objects(self, suffix: str) -> int:
        selector = fs.FileSelector(f"{self.catalog.bucket}/warehouse", allow_not_found=True, recursive=True)
        infos = self.catalog.server.fs().get_file_info(selector)
        return sum(1 for i in infos if i.is_file and i.path.endswith(suffix))

    def probe(self, kind: str) -> int:
        """started: data files written (a task staged a chunk); written: table metadata versions."""
        return self._objects(".parquet") if kind == "started" else self._objects(".metadata.json")

    def read(self) -> pa.Table | None:
        table = self.catalog.try_load(self.ident)
        if table is None or table.current_snapshot() is None:
            return None
        return table.scan().to_arrow()

    def fingerprint(self) -> tuple[Any, ...]:
        table = self.catalog.try_load(self.ident)
        if table is None:
            return ()
        return (table.metadata_location, tuple(s.snapshot_id for s in table.metadata.snapshots))


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_sigkill_into_an_iceberg_table_on_s3_delivers_every_change_exactly_once(
    s3_catalog: S3Catalog, moto: MotoServer, spark: Any, tmp_path: Path, record_property: Any
) -> None:
    table = build_mixed_table(s3_catalog, "ns.events")  # type: ignore[arg-type]
    oracle = read_changes(table, spark=spark)
    sink_cat = new_s3_catalog(moto, tmp_path / "sinkcat", "s3crashsink")
    sink = S3IcebergSinkSpec(f"iceberg://{sink_cat.name}/{SINK_IDENT}", sink_cat, SINK_IDENT)
    state_url = f"sqlite:///{tmp_path}/state.db"
    consumer = "crash-iceberg-s3"
    env = child_env([s3_catalog, sink_cat], tmp_path / "spark")  # type: ignore[list-item]
    cmd = [
        *icetail_command(), "run",
        "--catalog", s3_catalog.name, "--table", "ns.events",
        "--state", state_url, "--sink", sink.url, "--consumer", consumer,
        "--until-caught-up", "--max-snapshots-per-batch", "2", "--chunk-rows", "100",
    ]  # fmt: skip
    assert_exactly_once_under_kills(
        cmd, env, state_url=state_url, consumer=consumer, sink=sink, expected_rows=oracle,
        current_snapshot_id=table.metadata.current_snapshot_id,
        schedule=kill_schedule(random.Random(f"{SEED}:iceberg+s3"), KILLS), logs=tmp_path / "logs",
        label=f"seed {SEED}", record=record_property,
    )  # fmt: skip
