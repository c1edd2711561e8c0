"""The in-process engine reads splits on threads (reader/ordered_splits.py): same chunks, order and errors.

A real pyiceberg table of many small files of different sizes (one split each), read with
one-row or two-row chunks so that splits have different numbers of chunks; the reference is the
same read one split after another (ICETAIL_LOCAL_THREADS=1), which is what the engine did before.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetail.kernel.errors import ConfigError, IcetailError
from icetail.kernel.settings import LOCAL_THREADS_ENV
from icetail.monitor.planning.planner import Planner
from icetail.reader import local
from icetail.reader.changes.read_setup import read_context
from icetail.reader.local import local_threads, run_splits_in_process, split_reader
from icetail.reader.ordered_splits import THREAD_NAME
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.spark.tasks import split_chunks
from icetail.reader.split.context import ReadContext
from icetail.reader.split.read import Chunk
from icetail.sinks.base import SplitSlot
from icetail.sinks.files.parquet import ParquetStager
from tests.support.catalogs import new_catalog
from tests.support.small_table import SCHEMA

SIZES = (3, 7, 4, 12, 5, 3, 9, 4, 11, 6, 8, 10, 3, 5)  # rows per file, so chunks per split at chunk_rows=1


@pytest.fixture
def splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ReadContext, list[SplitRequest]]:
    local = new_catalog(tmp_path, "threads")
    for key, value in local.env().items():
        monkeypatch.setenv(key, value)
    catalog = local.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=SCHEMA)
    first = 0
    for size in SIZES:
        ids = list(range(first, first + size))
        table.append(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, SCHEMA))
        first += size
    table = catalog.load_table("ns.t")
    plan = Planner(table).plan(None, table.metadata.current_snapshot_id)
    assert len(plan.splits) == len(SIZES)
    return read_context(table, plan.schema_id, plan.tasks), [SplitRequest(split) for split in plan.splits]


def _seen(chunks: list[Chunk]) -> list[tuple[Any, ...]]:
    return [
        (c.split_id, c.row_start_inclusive, c.next_row_exclusive, c.done, c.staged, c.change_counts)
        + ((c.batch.to_pylist(),) if c.batch is not None else ())
        for c in chunks
    ]


def _one_after_another(
    context: ReadContext, requests: list[SplitRequest], chunk_rows: int, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> list[Chunk]:
    with monkeypatch.context() as patch:
        patch.setenv(LOCAL_THREADS_ENV, "1")
        return list(run_splits_in_process(context, requests, chunk_rows, **kw))


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def test_chunks_come_in_the_order_of_one_split_after_another(
    splits: tuple[ReadContext, list[SplitRequest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, requests = splits
    for chunk_rows in (1, 2):
        expected = _seen(_one_after_another(context, requests, chunk_rows, monkeypatch))
        assert sum(len(c[-1]) for c in expected) == sum(SIZES)
        for threads, buffer_bytes in [(2, 1), (4, 1), (3, 1 << 30), (16, 1000)]:
            reader = split_reader(context, requests, chunk_rows, None, threads, buffer_bytes)
            assert _seen(list(reader.chunks())) == expected, (chunk_rows, threads, buffer_bytes)
            if buffer_bytes == 1:  # one chunk past the bound, and the caller's next one
                assert 1 <= reader.peak_buffered_chunks <= 2
        monkeypatch.setenv(LOCAL_THREADS_ENV, "3")
        assert _seen(list(run_splits_in_process(context, requests, chunk_rows))) == expected
    assert not _reader_threads()


def test_an_error_in_a_later_split_is_raised_at_its_place_with_the_same_class_and_message(
    splits: tuple[ReadContext, list[SplitRequest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, requests = splits
    os.remove(urlparse(requests[9].split.task.data_file.path).path)  # gone outside Iceberg

    def read(chunks: Any) -> tuple[list[tuple[Any, ...]], BaseException]:
        got: list[Chunk] = []
        with pytest.raises(IcetailError) as raised:
            for chunk in chunks:
                got.append(chunk)
        return _seen(got), raised.value

    with monkeypatch.context() as patch:
        patch.setenv(LOCAL_THREADS_ENV, "1")
        expected, error = read(run_splits_in_process(context, requests, 1))
    assert len(expected) == sum(SIZES[:9])
    for threads in (2, 4):
        got, other = read(split_reader(context, requests, 1, None, threads, 1 << 20).chunks())
        assert got == expected
        assert (type(other), str(other)) == (type(error), str(error))
        assert requests[9].split.task.data_file.path in str(other)
    assert not _reader_threads()


def test_a_caller_that_stops_early_stops_the_threads_and_the_buffer_stays_bounded(
    splits: tuple[ReadContext, list[SplitRequest]],
) -> None:
    context, requests = splits
    reader = split_reader(context, requests, 1, None, 3, 1)
    chunks = reader.chunks()
    first = next(chunks)
    deadline = time.monotonic() + 60  # a wait for a state, not a timing: the threads fill the buffer
    while not reader.stalled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.stalled
    assert len(_reader_threads()) == 3
    # every split has more chunks than the bound lets wait: each thread holds its first split
    assert reader.started_splits == 3
    assert 1 <= reader.peak_buffered_chunks <= 2
    chunks.close()
    assert not _reader_threads()
    assert first.batch is not None and first.batch.select(["id", "v"]).to_pylist() == [{"id": 0, "v": "v0"}]
    dropped = split_reader(context, requests, 1, None, 3, 1).chunks()
    next(dropped)
    del dropped  # a caller that lets go without closing: the generator closes as it is collected
    assert not _reader_threads()


def test_chunks_staged_by_the_threads_are_those_of_one_split_after_another(
    splits: tuple[ReadContext, list[SplitRequest]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The parquet sink's task-side writer, called from several threads at once (a file per chunk key)."""
    context, requests = splits
    slotted = [SplitRequest(r.split, stage_as=SplitSlot("c", "b1", i)) for i, r in enumerate(requests)]
    by_engine = {}
    for threads in ("1", "4"):
        stager = ParquetStager(str(tmp_path / f"stage-{threads}"), str(tmp_path / "sink"))
        monkeypatch.setenv(LOCAL_THREADS_ENV, threads)
        chunks = list(run_splits_in_process(context, slotted, 2, stager=stager))
        assert all(c.batch is None and c.staged for c in chunks)
        by_engine[threads] = [
            (Path(c.staged).name, c.change_counts, pq.read_table(c.staged).to_pylist()) for c in chunks if c.staged
        ]
    assert by_engine["4"] == by_engine["1"]
    assert sum(len(rows) for _, _, rows in by_engine["4"]) == sum(SIZES)


def test_the_threads_setting() -> None:
    assert local_threads({LOCAL_THREADS_ENV: "3"}) == 3
    assert 1 <= local_threads({}) <= 8
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match=f"{LOCAL_THREADS_ENV}='{bad}' is not a number of threads"):
            local_threads({LOCAL_THREADS_ENV: bad})


def test_splits_are_decoded_on_pyarrows_threads_in_process_only_and_give_the_same_chunks(
    splits: tuple[ReadContext, list[SplitRequest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow's pool fills the cores the split threads leave idle (R67); one thread means one thread."""
    context, requests = splits
    for request in requests[:3]:
        for chunk_rows in (None, 2):
            by_flag = [
                _seen(list(split_chunks(context, request, chunk_rows, None, arrow_threads=flag)))
                for flag in (False, True)
            ]
            assert by_flag[0] == by_flag[1] and by_flag[0]
    seen_flags: list[bool] = []

    def spied(*args: Any, arrow_threads: bool, **kwargs: Any) -> Any:
        seen_flags.append(arrow_threads)
        return split_chunks(*args, arrow_threads=arrow_threads, **kwargs)

    monkeypatch.setattr(local, "split_chunks", spied)
    for threads, many in (("1", requests), ("2", requests), ("2", requests[:1])):
        monkeypatch.setenv(LOCAL_THREADS_ENV, threads)
        seen_flags.clear()
        assert list(run_splits_in_process(context, many, None))
        assert seen_flags == [threads != "1"] * len(many), (threads, len(many))
