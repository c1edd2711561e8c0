"""A crash inside a snapshot reconciled in partitions resumes at the partition, exactly once.

The source: 6 appends of a file of 2,000 rows, then a copy-on-write DELETE of 1% of the rows that
rewrites every file (12,000 rows deleted and inserted again, 11,880 of them carry-overs), which
`run` reconciles in partitions of a few KB (reader/changes/shuffle.py): about 40 partitions, the
non-empty ones one sink chunk each. Each test crashes the run inside that snapshot after some
partitions were committed, then resumes and checks that
- the sink holds exactly `read_changes` of the table (multisets of full rows),
- the resumed run wrote only the partitions at or after the stored `parts_done` (the one in
  flight replayed under its own key), never one already committed.
The crash is simulated in-process by a sink that raises on its k-th write (rows written from
the driver), and for real by SIGKILLing an `icetail run` child (rows staged by the Spark tasks)
held after its first committed partition.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import In
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.base import ChunkKey
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.checkpoint import Checkpoint
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.crash import kill_group
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, hold_env
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import CrashingSink, SimulatedCrash
from tests.support.stores import expire_dead_lease
from tests.support.tables import BASE_SCHEMA, make_rows

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

TABLE = "ns.cow"
FILES, ROWS_PER_FILE = 6, 2_000
PARTITION_BYTES = 2_000  # against ~12 KB files: about 40 partitions


@dataclass(frozen=True)
class CowSource:
    catalog: LocalCatalog
    table: Table
    expected: pa.Table


@pytest.fixture(scope="module")
def cow_source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> CowSource:
    cat = new_catalog(tmp_path_factory.mktemp("cow-source"), "cowsrc")
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, schema=BASE_SCHEMA, properties={"write.delete.mode": "copy-on-write"})
    for f in range(FILES):  # a file each
        table.append(make_rows(BASE_SCHEMA, range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE)))
    table = catalog.load_table(TABLE)
    # rewrites every file: carry-overs and 1% deletes
    table.delete(In("id", [i for i in range(FILES * ROWS_PER_FILE) if i % 100 == 3]))
    table = catalog.load_table(TABLE)
    return CowSource(cat, table, read_changes(table, spark=spark))


def _config(source: CowSource, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": TABLE,
        "state_url": f"sqlite:///{tmp_path}/state.db",
        "sink_url": f"parquet://{tmp_path}/sink",
        "consumer": "cow",
        "reconcile_partition_bytes": PARTITION_BYTES,
        "max_snapshots_per_batch": 1,
        **overrides,
    }
    return PipelineConfig(**values)


class _Recording:
    """A parquet sink (rows written from the driver) that records the keys it is asked to write."""

    exactly_once = True

    def __init__(self, directory: Path) -> None:
        self.inner = ParquetDirSink(directory, consumer="cow")
        self.keys: list[ChunkKey] = []

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        self.keys.append(key)
        return self.inner.write(key, rows)

    def close(self) -> None:
        self.inner.close()


def _anchor_parts(checkpoint: Checkpoint | None) -> tuple[int, int]:
    """(split index of the partitioned snapshot's anchor, its delivered partitions)."""
    assert checkpoint is not None and checkpoint.inflight is not None
    marked = [(i, p.parts_done) for i, p in enumerate(checkpoint.inflight.progress) if p.parts_done is not None]
    assert len(marked) == 1, checkpoint.inflight.progress
    index, parts = marked[0]
    assert parts is not None and not any(p.done for p in checkpoint.inflight.progress)
    return index, parts


def _deliver_the_append(source: CowSource, tmp_path: Path, spark: Any) -> None:
    with Pipeline(_config(source, tmp_path, max_snapshots_per_batch=FILES), spark=spark) as pipeline:
        outcome = pipeline.run(once=True)[0]
    assert outcome.rows_by_change_type == {"INSERT": FILES * ROWS_PER_FILE}


def _assert_exactly_once(source: CowSource, tmp_path: Path) -> None:
    schema = source.expected.schema
    expected = row_multiset(source.expected, schema)
    got = row_multiset(pq.read_table(tmp_path / "sink"), schema)
    assert expected == got, diff_report(expected, got)


def _shape_of_the_delete(source: CowSource) -> None:
    kinds = source.expected.column("_change_type").to_pylist()
    assert kinds.count("DELETE") == FILES * ROWS_PER_FILE // 100 and kinds.count("INSERT") == FILES * ROWS_PER_FILE


@pytest.mark.parametrize(("crash_on", "after_write"), [(3, False), (5, True)])
def test_a_crash_between_partitions_resumes_at_the_partition(
    cow_source: CowSource, tmp_path: Path, spark: Any, use_catalogs: Any, crash_on: int, after_write: bool
) -> None:
    use_catalogs(cow_source.catalog)
    _shape_of_the_delete(cow_source)
    _deliver_the_append(cow_source, tmp_path, spark)
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="cow"), crash_on, after_write=after_write)
    with pytest.raises(SimulatedCrash), Pipeline(_config(cow_source, tmp_path), sink=crashing, spark=spark) as first:
        first.run(once=True)
    with open_store(_config(cow_source, tmp_path).state_url) as store:
        anchor, parts_done = _anchor_parts(store.load("cow"))
    assert parts_done >= crash_on - 1  # the non-empty partitions committed before the crash, and empty ones

    recording = _Recording(tmp_path / "sink")
    with Pipeline(_config(cow_source, tmp_path), sink=recording, spark=spark) as second:
        outcome = second.run(once=True)[0]
    assert outcome.resumed and outcome.completed
    written = [key.row_start_inclusive for key in recording.keys]
    assert written and min(written) == parts_done and written == sorted(written), (parts_done, written)
    assert {key.split_index for key in recording.keys} == {anchor}
    rows = sum(pq.read_metadata(tmp_path / "sink" / f"{key.name}.parquet").num_rows for key in recording.keys)
    assert outcome.rows_by_change_type == {"DELETE": rows}
    _assert_exactly_once(cow_source, tmp_path)


def test_sigkill_inside_a_partitioned_snapshot_resumes_at_the_partition(
    cow_source: CowSource, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    use_catalogs(cow_source.catalog)
    _deliver_the_append(cow_source, tmp_path, spark)
    config = _config(cow_source, tmp_path)
    hold = tmp_path / "hold"
    hold.touch()
    env = {**child_env([cow_source.catalog], tmp_path / "spark"), **hold_env(HOLD_AFTER_CHUNK_ENV, hold)}
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", config.catalog,
        "--table", TABLE,
        "--state", config.state_url,
        "--sink", config.sink_url,
        "--consumer", "cow",
        "--once",
        "--max-snapshots-per-batch", "1",
        "--reconcile-partition-bytes", str(PARTITION_BYTES),
    ]  # fmt: skip
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not Path(str(hold) + ".held").exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            kill_group(proc)
    assert proc.returncode is not None and proc.returncode < 0, f"the run was not killed:\n{log.read_text()}"
    expire_dead_lease(config.state_url, "cow")
    with open_store(config.state_url) as store:
        anchor, parts_done = _anchor_parts(store.load("cow"))
    assert parts_done >= 1
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sink").glob("*.parquet")}

    with Pipeline(config, spark=spark) as pipeline:  # the real staging sink: the tasks write the rows
        outcome = pipeline.run(once=True)[0]
    assert outcome.resumed and outcome.completed
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sink").glob("*.parquet")}
    rewritten = sorted(int(n[: -len(".parquet")].rsplit("-", 1)[1]) for n in after if after[n] != before.get(n))
    assert rewritten and min(rewritten) >= parts_done, (parts_done, rewritten)
    assert all(name in after and after[name] == before[name] for name in before)  # committed: never touched
    _assert_exactly_once(cow_source, tmp_path)
