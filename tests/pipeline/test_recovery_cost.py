"""What a restart costs: it re-decodes only the row group where the committed offset lies.

One data file of 200,000 rows in row groups of 10,000, read in chunks of 4,000 rows: a row
group is cut into chunks [0, 4000), [4000, 8000), [8000, 10000) relative to its start.

`icetail.reader.split.read.read_split` resumes a split at the committed file row C by opening C's
row group and decoding it from its first row (pyarrow cannot start inside a row group), then
every later row group of the split; row groups wholly before C are never opened. So the
restarted batch decodes exactly

    sum over unfinished splits of (split end - start of the row group holding C)

rows, i.e. the undelivered rows plus C - start_of_row_group(C) rows delivered before the crash:
zero when the crash hit a row-group boundary, at most row group - chunk rows otherwise (never a
whole row group, never anything of a finished split). The tests assert that exact number via
`BatchOutcome.rows_decoded`, and that the sink then holds exactly `read_changes` of the table.

The crash is simulated in-process by a sink wrapper that raises on its k-th write (before or
after delegating to the real parquet sink), and for real by SIGKILLing an `icetail run` child.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.checkpoint import Checkpoint
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.crash import kill_group
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import CrashingSink, SimulatedCrash
from tests.support.stores import expire_dead_lease
from tests.support.tables import build_big_file_table, data_file_layout

ROWS = 200_000
ROW_GROUP_ROWS = 10_000
CHUNK_ROWS = 4_000
KILLED_RUN_CHUNK_ROWS = 500
CHUNKS_PER_ROW_GROUP = 3  # 4000 + 4000 + 2000
TABLE = "ns.big"


@dataclass(frozen=True)
class BigSource:
    catalog: LocalCatalog
    table: Table
    expected: pa.Table
    path: str
    row_group_starts: np.ndarray  # file row where each row group starts, plus the file's row count
    file_size: int


@pytest.fixture(scope="module")
def big_source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> BigSource:
    cat = new_catalog(tmp_path_factory.mktemp("big-source"), "bigsrc")
    table = build_big_file_table(cat, TABLE, rows=ROWS, row_group_rows=ROW_GROUP_ROWS)
    layout = data_file_layout(table)
    assert [(rows, groups) for _, rows, groups in layout] == [(ROWS, ROWS // ROW_GROUP_ROWS)], layout
    path = layout[0][0]
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    expected = read_changes(table, spark=spark)
    assert expected.num_rows == ROWS
    return BigSource(cat, table, expected, path, starts, Path(path).stat().st_size)


def expected_restart_decode(source: BigSource, checkpoint: Checkpoint) -> tuple[int, int, int]:
    """(rows the restart decodes, rows still undelivered, rows decoded again) from the stored offsets."""
    assert checkpoint.inflight is not None
    starts = source.row_group_starts
    decode = undelivered = 0
    for split, progress in checkpoint.inflight.pending():
        first = starts[split.row_group_start]
        end = starts[split.row_group_end if split.row_group_end is not None else len(starts) - 1]
        resume = progress.next_row_exclusive if progress.next_row_exclusive is not None else first
        group_start = starts[np.searchsorted(starts, resume, side="right") - 1]  # start of resume's row group
        decode += int(end - group_start)
        undelivered += int(end - resume)
    return decode, undelivered, decode - undelivered


def config_for(source: BigSource, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    values: dict[str, Any] = {
        "catalog": source.catalog.name,
        "table": TABLE,
        "state_url": f"sqlite:///{tmp_path}/state.db",
        "sink_url": f"parquet://{tmp_path}/sink",
        "consumer": "cost",
        "chunk_rows": CHUNK_ROWS,
        **overrides,
    }
    return PipelineConfig(**values)


def sink_rows(tmp_path: Path) -> pa.Table:
    return pq.read_table(tmp_path / "sink")  # a directory: pyarrow skips `_tmp`


@pytest.mark.parametrize(
    ("crash_on", "after_write", "splits_of_row_groups"),
    [
        pytest.param(22, False, None, id="boundary-before-write"),  # chunk [70000, 74000): C = 70000
        pytest.param(23, False, None, id="mid-group-before-write"),  # chunk [74000, 78000): C = 74000
        pytest.param(24, True, None, id="mid-group-after-write"),  # chunk [78000, 80000) in the sink: C = 78000
        pytest.param(23, True, 5, id="several-splits"),  # splits of 5 row groups; split 0 finished
    ],
)
def test_restart_redecodes_only_the_row_group_of_the_committed_offset(
    big_source: BigSource,
    tmp_path: Path,
    spark: Any,
    use_catalogs: Any,
    crash_on: int,
    after_write: bool,
    splits_of_row_groups: int | None,
) -> None:
    use_catalogs(big_source.catalog)
    overrides: dict[str, Any] = {}
    if splits_of_row_groups is not None:
        groups = len(big_source.row_group_starts) - 1
        overrides["target_split_bytes"] = big_source.file_size * splits_of_row_groups // groups
    config = config_for(big_source, tmp_path, **overrides)

    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="cost"), crash_on, after_write=after_write)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()

    with open_store(config.state_url) as store:
        checkpoint = store.load("cost")
    assert checkpoint is not None and checkpoint.inflight is not None
    progress = checkpoint.inflight.progress
    if splits_of_row_groups is not None:
        assert len(progress) >= 3 and progress[0].done and not progress[1].done, progress
    committed = [p.next_row_exclusive for p in progress if p.next_row_exclusive is not None and not p.done]
    # write k (1-based) is chunk (k-1) % 3 of row group (k-1) // 3; the chunk before it is committed
    group, position = divmod(crash_on - 1, CHUNKS_PER_ROW_GROUP)
    expected_offset = group * ROW_GROUP_ROWS + [0, 4_000, 8_000][position]
    assert committed == [expected_offset], progress
    decode, undelivered, again = expected_restart_decode(big_source, checkpoint)
    assert undelivered == ROWS - expected_offset
    assert again == expected_offset - group * ROW_GROUP_ROWS < ROW_GROUP_ROWS

    with Pipeline(config, sink=ParquetDirSink(tmp_path / "sink", consumer="cost"), spark=spark) as second:
        results = second.run()
    assert len(results) == 1, results
    outcome = results[0]
    assert outcome.resumed and outcome.completed
    assert outcome.rows_decoded == decode, (outcome.rows_decoded, decode, undelivered, again)
    assert outcome.rows_by_change_type == {"INSERT": undelivered}
    remaining_groups = len(big_source.row_group_starts) - 1 - group
    assert outcome.row_groups == remaining_groups

    schema = big_source.expected.schema
    expected = row_multiset(big_source.expected, schema)
    got = row_multiset(sink_rows(tmp_path), schema)
    assert not diff_report(expected, got), diff_report(expected, got)


def test_restart_with_another_chunk_size_cuts_the_batch_as_before(
    big_source: BigSource, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """The batch id records its chunk size: a restart configured otherwise replays the same chunk keys."""
    use_catalogs(big_source.catalog)
    config = config_for(big_source, tmp_path)
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="cost"), 23, after_write=True)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing, spark=spark) as first:
        first.run()
    written = sorted(p.name for p in (tmp_path / "sink").glob("*.parquet"))
    with open_store(config.state_url) as store:
        checkpoint = store.load("cost")
    assert checkpoint is not None
    decode, undelivered, _ = expected_restart_decode(big_source, checkpoint)

    resumed = dataclasses.replace(config, chunk_rows=3_000)
    with Pipeline(resumed, sink=ParquetDirSink(tmp_path / "sink", consumer="cost"), spark=spark) as second:
        results = second.run()
    assert results[0].resumed and results[0].rows_decoded == decode and results[0].rows == undelivered
    assert results[0].chunks == ROWS // ROW_GROUP_ROWS * CHUNKS_PER_ROW_GROUP - 22  # 4000-row chunks again
    names = sorted(p.name for p in (tmp_path / "sink").glob("*.parquet"))
    assert set(written) <= set(names) and len(names) == ROWS // ROW_GROUP_ROWS * CHUNKS_PER_ROW_GROUP
    schema = big_source.expected.schema
    expected = row_multiset(big_source.expected, schema)
    got = row_multiset(sink_rows(tmp_path), schema)
    assert not diff_report(expected, got), diff_report(expected, got)


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_restart_after_sigkill_of_a_real_run(
    big_source: BigSource, tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """SIGKILL an `icetail run` child mid-file, then resume in-process: same bound, same stream."""
    import subprocess

    use_catalogs(big_source.catalog)
    config = config_for(big_source, tmp_path)
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", config.catalog,
        "--table", TABLE,
        "--state", config.state_url,
        "--sink", config.sink_url,
        "--consumer", config.consumer or "",
        # small chunks: the parquet sink's files are written by the Spark tasks, so the driver
        # commits chunks within milliseconds of each other and 50 chunks could all land before
        # the kill; 400 leave a wide window to kill the run mid-file
        "--chunk-rows", str(KILLED_RUN_CHUNK_ROWS),
    ]  # fmt: skip
    rng = random.Random(7)
    wanted = rng.randint(3, 20)  # committed chunk files to wait for
    sink_dir = tmp_path / "sink"
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            env=child_env([big_source.catalog], tmp_path / "spark"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if sink_dir.exists() and sum(1 for _ in sink_dir.glob("*.parquet")) >= wanted:
                    time.sleep(rng.uniform(0.0, 0.005))
                    break
                time.sleep(0.005)
        finally:
            kill_group(proc)
    assert proc.returncode is not None and proc.returncode < 0, f"the run was not killed:\n{log.read_text()}"
    expire_dead_lease(config.state_url, "cost")

    with open_store(config.state_url) as store:
        checkpoint = store.load("cost")
    assert checkpoint is not None and checkpoint.inflight is not None, "killed before the batch was written ahead"
    decode, undelivered, again = expected_restart_decode(big_source, checkpoint)
    assert again < ROW_GROUP_ROWS

    with Pipeline(config, sink=ParquetDirSink(sink_dir, consumer="cost"), spark=spark) as pipeline:
        results = pipeline.run()
    assert len(results) == 1 and results[0].resumed
    assert results[0].rows_decoded == decode, (results[0].rows_decoded, decode, undelivered, again)
    assert results[0].rows == undelivered

    schema = big_source.expected.schema
    expected = row_multiset(big_source.expected, schema)
    got = row_multiset(sink_rows(tmp_path), schema)
    assert not diff_report(expected, got), diff_report(expected, got)
