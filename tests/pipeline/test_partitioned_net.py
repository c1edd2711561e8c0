"""`run --net` folded in partitions by Spark tasks delivers what the driver fold delivers, exactly once.

The source is the crash tests' mixed table (pyiceberg: appends, a copy-on-write delete with
carry-overs, an overwrite as delete + append of the same ids, deletes of rows appended shortly
before, a schema change). Each net batch is delivered twice: folded whole in the driver
(`reconcile_partition_bytes=0`) and in partitions of a few KB (reader/changes/net_shuffle.py, a chunk
each). The two sinks must hold the same rows (multisets of full rows, stamps included), with and
without identifier columns, and the net rows replayed onto the empty table give its rows at the
end. A crash between partitions resumes at the partition: what was committed is never written
again, and the sink ends with the driver fold's rows once. (v3 row lineage and Java's
copy-on-write statements: tests/differential/test_partitioned_net.py.)
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.base import ChunkKey
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.crash import kill_group
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, hold_env
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import CrashingSink, SimulatedCrash, read_parquet_sink
from tests.support.stores import expire_dead_lease
from tests.support.tables import build_mixed_table

TABLE = "ns.events"
TINY = 3_000  # estimated bytes per partition: a dozen partitions per batch here
ADDED, REMOVED = ("INSERT", "UPDATE_AFTER"), ("DELETE", "UPDATE_BEFORE")


@dataclass(frozen=True)
class Source:
    catalog: LocalCatalog
    table: Table


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    cat = new_catalog(tmp_path_factory.mktemp("net-fold"), "netfold")
    return Source(cat, build_mixed_table(cat, TABLE))


def _config(source: Source, root: Path, partition_bytes: int, **overrides: Any) -> PipelineConfig:
    root.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": TABLE,
        "state_url": f"sqlite:///{root / 'state.db'}",
        "sink_url": f"parquet://{root / 'sink'}",
        "consumer": "net",
        "net": True,
        "chunk_rows": 100,
        "reconcile_partition_bytes": partition_bytes,
        **overrides,
    }
    return PipelineConfig(**values)


def _run(config: PipelineConfig, spark: Any, sink: Any = None) -> tuple[pa.Table, int]:
    with Pipeline(config, sink=sink, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert outcomes and all(o.completed for o in outcomes), outcomes
    rows = read_parquet_sink(Path(config.sink_url.split("://", 1)[1]))
    assert rows is not None
    return rows, sum(o.chunks for o in outcomes)


def _replayed(net: pa.Table, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """The rows at the end, from the empty table and the net rows of its whole history."""
    kinds = net.column("_change_type").to_pylist()
    rows = list(zip(*(net.column(c).to_pylist() for c in columns), strict=True))
    added = Counter(r for r, k in zip(rows, kinds, strict=True) if k in ADDED)
    removed = Counter(r for r, k in zip(rows, kinds, strict=True) if k in REMOVED)
    assert not removed - added, "the net rows remove rows that were never there"
    return added - removed


@pytest.mark.parametrize("identifiers", [("id",), None], ids=["identifiers", "no-identifiers"])
def test_partitioned_net_equals_the_driver_fold(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any, identifiers: tuple[str, ...] | None
) -> None:
    use_catalogs(source.catalog)
    driver, driver_chunks = _run(_config(source, tmp_path / "driver", 0, identifier_columns=identifiers), spark)
    folded, chunks = _run(_config(source, tmp_path / "parts", TINY, identifier_columns=identifiers), spark)
    assert chunks > driver_chunks + 5, (chunks, driver_chunks)  # the partitioned fold really ran
    expected, got = row_multiset(driver, driver.schema), row_multiset(folded, driver.schema)
    assert expected == got, diff_report(expected, got)
    kinds = Counter(driver.column("_change_type").to_pylist())
    assert kinds["DELETE"] + kinds["UPDATE_BEFORE"] > 0, kinds  # the batches net out rows, not only inserts
    table = source.catalog.catalog().load_table(TABLE)
    end = table.scan().to_arrow()
    columns = [f.name for f in end.schema]
    at_end = Counter(zip(*(end.column(c).to_pylist() for c in columns), strict=True))
    assert _replayed(folded, columns) == at_end
    if identifiers:  # a replay folds the same rows into the same partitions, in the same order
        _run(_config(source, tmp_path / "again", TINY, identifier_columns=identifiers), spark)
        first, again = (sorted((tmp_path / run / "sink").glob("*.parquet")) for run in ("parts", "again"))
        assert [_place(p.name) for p in first] == [_place(p.name) for p in again]
        assert all(pq.read_table(a).equals(pq.read_table(b)) for a, b in zip(first, again, strict=True))


def _place(name: str) -> tuple[str, ...]:
    """A chunk file's (batch generation, split index, first row): its name without the batch's random part."""
    parts = name.removesuffix(".parquet").split("-")
    return (parts[1], *parts[-2:])


class _Recording:
    """A parquet sink that records the keys it is asked to write."""

    exactly_once = True

    def __init__(self, directory: Path) -> None:
        self.inner = ParquetDirSink(directory, consumer="net")
        self.keys: list[ChunkKey] = []

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        self.keys.append(key)
        return self.inner.write(key, rows)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize(("crash_on", "after_write"), [(2, False), (4, True)])
def test_a_crash_between_net_partitions_resumes_at_the_partition(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any, crash_on: int, after_write: bool
) -> None:
    use_catalogs(source.catalog)
    driver, _ = _run(_config(source, tmp_path / "driver", 0, identifier_columns=("id",)), spark)
    config = _config(source, tmp_path / "parts", TINY, identifier_columns=("id",))
    sink = ParquetDirSink(tmp_path / "parts" / "sink", consumer="net")
    crashing = CrashingSink(sink, crash_on, after_write=after_write)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()
    with open_store(config.state_url) as store:
        checkpoint = store.load("net")
    assert checkpoint is not None and checkpoint.inflight is not None
    anchor = checkpoint.inflight.progress[0]
    parts_done = anchor.parts_done or 0
    assert parts_done >= crash_on - 1 and not any(p.done for p in checkpoint.inflight.progress)
    assert [p.parts_done for p in checkpoint.inflight.progress[1:]] == [None] * (len(checkpoint.inflight.progress) - 1)

    recording = _Recording(tmp_path / "parts" / "sink")
    delivered, _ = _run(config, spark, sink=recording)
    first_batch = [k for k in recording.keys if k.batch_id == checkpoint.inflight.batch.batch_id]
    written = [k.row_start_inclusive for k in first_batch]
    assert written and min(written) == parts_done and written == sorted(written), (parts_done, written)
    assert {(k.split_index, k.split_id) for k in first_batch} == {(0, anchor.split_id)}
    expected, got = row_multiset(driver, driver.schema), row_multiset(delivered, driver.schema)
    assert expected == got, diff_report(expected, got)


def test_a_net_batch_cut_by_one_key_is_not_resumed_cut_by_another(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """Partitions delivered by `id` cannot be completed by partitions of content: one line, nothing written."""
    use_catalogs(source.catalog)
    config = _config(source, tmp_path, TINY, identifier_columns=("id",))
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="net"), 3, after_write=False)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()
    written = sorted(p.name for p in (tmp_path / "sink").glob("*.parquet"))
    other = _config(source, tmp_path, TINY, identifier_columns=None)
    with pytest.raises(ConfigError, match=r"the net changes of batch .* partly delivered .*--identifier-columns"):
        with Pipeline(other, spark=spark) as second:
            second.run()
    assert sorted(p.name for p in (tmp_path / "sink").glob("*.parquet")) == written


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_sigkill_between_net_partitions_resumes_at_the_partition(
    source: Source, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """A real `icetail run --net` killed while held after its first committed partition."""
    use_catalogs(source.catalog)
    driver, _ = _run(_config(source, tmp_path / "driver", 0, identifier_columns=("id",)), spark)
    config = _config(source, tmp_path / "parts", TINY, identifier_columns=("id",))
    hold = tmp_path / "hold"
    hold.touch()
    env = {**child_env([source.catalog], tmp_path / "spark"), **hold_env(HOLD_AFTER_CHUNK_ENV, hold)}
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", config.catalog,
        "--table", TABLE,
        "--state", config.state_url,
        "--sink", config.sink_url,
        "--consumer", "net",
        "--once",
        "--net",
        "--identifier-columns", "id",
        "--chunk-rows", "100",
        "--reconcile-partition-bytes", str(TINY),
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
    expire_dead_lease(config.state_url, "net")
    with open_store(config.state_url) as store:
        checkpoint = store.load("net")
    assert checkpoint is not None and checkpoint.inflight is not None
    parts_done = checkpoint.inflight.progress[0].parts_done
    assert parts_done is not None and parts_done >= 1
    sink = tmp_path / "parts" / "sink"
    before = {p.name: p.stat().st_mtime_ns for p in sink.glob("*.parquet")}

    delivered, _ = _run(config, spark)
    after = {p.name: p.stat().st_mtime_ns for p in sink.glob("*.parquet")}
    assert all(name in after and after[name] == before[name] for name in before)  # committed: never touched
    expected, got = row_multiset(driver, driver.schema), row_multiset(delivered, driver.schema)
    assert expected == got, diff_report(expected, got)
