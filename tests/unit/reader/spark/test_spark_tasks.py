"""How a wave of splits runs as Spark tasks: cut into contiguous runs balanced by bytes, rows handed over."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icetail.kernel.errors import IcetailError
from icetail.kernel.model import ChangeSplit, ChangeTask, ChangeType, CommitInfo, DataFileRef, FileChangeKind
from icetail.kernel.processes import host_tag
from icetail.kernel.settings import HANDOFF_DIR_ENV
from icetail.monitor.planning.planner import Planner
from icetail.reader.changes.read_setup import read_context
from icetail.reader.spark.handoff import HANDOFF_PREFIX, _publish, remove_orphaned_handoffs
from icetail.reader.spark.payloads import SplitRequest, decode, encode
from icetail.reader.spark.waves import DEFAULT_WAVE_BYTES, _stream_task, group_for_tasks, run_splits
from icetail.reader.split.metadata_columns import with_metadata
from icetail.reader.split.read import Chunk
from tests.support.small_table import SmallTable

COMMIT = CommitInfo(1, None, "append", 0, 1, 0)


def _wave(sizes: list[int]) -> list[SplitRequest]:
    data_file = DataFileRef("file:///t/data/a.parquet", "PARQUET", 10 * len(sizes), sum(sizes), 0, "()", 1)
    task = ChangeTask(data_file, FileChangeKind.ADDED, COMMIT)
    return [SplitRequest(ChangeSplit(task, i, i + 1, 10, size)) for i, size in enumerate(sizes)]


def _sizes(groups: list[list[SplitRequest]]) -> list[list[int]]:
    return [[request.split.estimated_bytes for request in group] for group in groups]


def test_every_split_once_in_order_within_the_task_bound() -> None:
    for sizes, max_tasks in [([1] * 20, 4), ([5, 1, 9, 2, 7, 3, 8], 3), ([4] * 3, 8), ([1], 1), ([3, 3], 1)]:
        wave = _wave(sizes)
        groups = group_for_tasks(wave, max_tasks)
        # contiguous runs, concatenated in wave order
        assert [request for group in groups for request in group] == wave
        assert 1 <= len(groups) <= min(max_tasks, len(wave))
        assert all(groups)
        assert group_for_tasks(wave, max_tasks) == groups  # same wave, same tasks


def test_equal_splits_spread_evenly_and_a_big_split_gets_a_task_of_its_own() -> None:
    assert _sizes(group_for_tasks(_wave([1] * 20), 4)) == [[1] * 5] * 4
    assert _sizes(group_for_tasks(_wave([100, 1, 1, 1, 1, 1]), 2)) == [[100], [1, 1, 1, 1, 1]]
    assert _sizes(group_for_tasks(_wave([1, 1, 1, 100]), 2)) == [[1, 1, 1], [100]]


def test_empty_wave_has_no_tasks() -> None:
    assert group_for_tasks([], 4) == []


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory the driver creates its handoff directories in (ICETAIL_HANDOFF_DIR)."""
    path = tmp_path / "scratch"
    path.mkdir()
    monkeypatch.setenv(HANDOFF_DIR_ENV, str(path))
    return path


def _read_all(small_table: SmallTable, spark: Any, wave_bytes: int = DEFAULT_WAVE_BYTES) -> Any:
    table = small_table.load()
    plan = Planner(table).plan(None, small_table.snapshot_ids[1])
    context = read_context(table, plan.schema_id, plan.tasks)
    return run_splits(spark, context, [SplitRequest(split) for split in plan.splits], wave_bytes=wave_bytes)


def test_waves_in_flight_deliver_every_split_in_plan_order(small_table: SmallTable, spark: Any) -> None:
    table = small_table.load()
    plan = Planner(table).plan(None, small_table.snapshot_ids[1])
    assert len(plan.splits) >= 2
    # one split per wave: several Spark jobs queued at once, results still in request order
    chunks = list(_read_all(small_table, spark, wave_bytes=1))
    assert [c.split_id for c in chunks] == [s.split_id for s in plan.splits]
    assert sorted(i for c in chunks if c.batch is not None for i in c.batch.column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_local_tasks_hand_rows_over_in_files_that_are_gone_afterwards(
    small_table: SmallTable, spark: Any, scratch: Path
) -> None:
    seen = []
    for chunk in _read_all(small_table, spark):
        assert [p.name for p in scratch.iterdir()][0].startswith("icetail-handoff-")  # while reading
        if chunk.batch is not None:
            seen.extend(chunk.batch.column("id").to_pylist())
    assert sorted(seen) == [1, 2, 3, 4, 5]
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("wave_bytes", [DEFAULT_WAVE_BYTES, 1], ids=["one-wave", "wave-per-split"])
def test_rows_handed_over_stay_readable_after_an_early_stop(
    small_table: SmallTable, spark: Any, scratch: Path, wave_bytes: int
) -> None:
    chunks = _read_all(small_table, spark, wave_bytes)
    first = next(c for c in chunks if c.batch is not None and c.batch.num_rows)
    chunks.close()  # the caller stops: the job group is cancelled and the handoff removed
    assert list(scratch.iterdir()) == []
    assert first.batch is not None and first.batch.column("id").to_pylist()  # still mapped


def test_handoff_directories_of_killed_drivers_of_this_host_are_removed(tmp_path: Path) -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # its pid names no running process any more
    names = {
        "dead": f"{HANDOFF_PREFIX}{host_tag()}-{finished.pid}-abc",
        "mine": f"{HANDOFF_PREFIX}{host_tag()}-{os.getpid()}-abc",  # a read of this process, running
        "parent": f"{HANDOFF_PREFIX}{host_tag()}-{os.getppid()}-abc",  # a live process
        "other host": f"{HANDOFF_PREFIX}another_host-{finished.pid}-abc",  # its pids mean nothing here
        "not ours": "icetail-handoffs-notes",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    (tmp_path / names["dead"] / "chunk.arrow").write_bytes(b"left by a SIGKILL")

    assert remove_orphaned_handoffs(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "dead")


def _published_task(handoff: Path, key: str, ids: list[list[int]], *, end: bool = True) -> None:
    """What a local task leaves in the handoff: one payload per chunk (rows in an Arrow file), then `.end`."""
    for seq, rows in enumerate(ids):
        batch = pa.RecordBatch.from_pydict({"id": pa.array(rows, pa.int64())})
        chunk = Chunk("split-0", seq * 10, seq * 10 + len(rows), batch, len(rows), 1, 0, seq == len(ids) - 1)
        _publish(str(handoff / f"{key}-{seq:07d}.chunk"), pickle.dumps(encode(chunk, str(handoff))))
    if end:
        _publish(str(handoff / f"{key}.end"), b"")


def _done(value: Any = None, error: BaseException | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_a_task_s_chunks_stream_in_order_and_their_files_are_taken(tmp_path: Path) -> None:
    _published_task(tmp_path, "w000000-t00000", [[1, 2], [3], [4, 5, 6]])
    _published_task(tmp_path, "w000000-t00001", [[7]])  # the next task's files are left alone

    chunks = list(_stream_task(str(tmp_path), "w000000-t00000", _done()))

    assert [c.batch.column("id").to_pylist() for c in chunks if c.batch is not None] == [[1, 2], [3], [4, 5, 6]]
    left = sorted(p.name for p in tmp_path.iterdir())
    # task 0's payloads and Arrow files are taken (the batches stay mapped); task 1's are untouched
    assert [n for n in left if not n.endswith(".arrow")] == [
        "w000000-t00000.end",
        "w000000-t00001-0000000.chunk",
        "w000000-t00001.end",
    ]
    assert len([n for n in left if n.endswith(".arrow")]) == 1


def test_a_failed_job_raises_its_error_instead_of_waiting_for_the_task(tmp_path: Path) -> None:
    _published_task(tmp_path, "w000000-t00000", [[1]], end=False)  # the task died after one chunk
    stream = _stream_task(str(tmp_path), "w000000-t00000", _done(error=RuntimeError("executor lost")))

    assert next(stream).row_count == 1
    with pytest.raises(RuntimeError, match="executor lost"):
        next(stream)


def test_a_job_that_finished_without_the_task_s_files_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IcetailError, match="without handing over its chunks"):
        list(_stream_task(str(tmp_path), "w000000-t00000", _done([0])))


@pytest.mark.parametrize("handoff", [True, False], ids=["handoff-file", "ipc-bytes"])
def test_chunks_cross_to_the_driver_unchanged_with_metadata_sent_once(tmp_path: Path, handoff: bool) -> None:
    commit = CommitInfo(7, None, "overwrite", 1_700_000_000_123, 3, 2)
    rows = pa.RecordBatch.from_pydict({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"]})
    inserts = with_metadata(rows, ChangeType.INSERT, commit)
    parts = [with_metadata(rows.slice(0, 1), ChangeType.DELETE, commit)]
    parts.append(with_metadata(rows.slice(1), ChangeType.INSERT, commit))
    mixed = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
    one_type = Chunk("s", 0, 3, inserts, 3, 1, 0, True, change_counts=(("INSERT", 3),))
    two_types = Chunk("s", 0, 3, mixed, 3, 1, 0, True, change_counts=(("DELETE", 1), ("INSERT", 2)))
    where = str(tmp_path) if handoff else None

    sent_once = encode(one_type, where)
    assert sent_once.constant == ("INSERT", 2, 7, 1_700_000_000_123_000)  # the values, not four columns
    for chunk, payload in ((one_type, sent_once), (two_types, encode(two_types, where))):
        decoded = decode(pickle.loads(pickle.dumps(payload)))
        assert decoded.batch is not None and decoded.batch.equals(chunk.batch, check_metadata=True)
        assert decoded.batch.schema == chunk.batch.schema
