"""The `changes --output` writer's parts: read-ahead on a thread, and batches regrouped into row groups."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from icetail.monitor.cli.output import row_groups
from icetail.monitor.cli.prefetch import Prefetched


def batch(start: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + rows), pa.int64())})


def test_read_ahead_yields_every_item_in_order() -> None:
    with Prefetched(iter(range(1000)), depth=2) as ahead:
        assert list(ahead) == list(range(1000))


def test_a_source_error_surfaces_after_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("unreadable file")

    seen: list[int] = []
    with Prefetched(source()) as ahead, pytest.raises(ValueError, match="unreadable file"):
        for item in ahead:
            seen.append(item)
    assert seen == [1, 2]


def test_a_consumer_that_gives_up_stops_the_reader_and_closes_its_source() -> None:
    closed = threading.Event()
    produced: list[int] = []

    def source() -> Iterator[int]:
        try:
            for i in range(1_000_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    with pytest.raises(RuntimeError), Prefetched(source(), depth=2) as ahead:
        for item in ahead:
            if item == 3:
                raise RuntimeError("disk full")
    assert closed.is_set()  # the generator's cleanup (a Spark job's cancel) ran before the with ended
    assert len(produced) < 100  # it read ahead by at most a few items, not the whole source


def test_small_batches_are_regrouped_up_to_the_row_bound_in_order() -> None:
    batches = [batch(i * 10, 10) for i in range(25)]
    groups = list(row_groups(batches, max_rows=100))
    assert [g.num_rows for g in groups] == [100, 100, 50]
    assert pa.concat_tables(groups).column("id").to_pylist() == list(range(250))


def test_a_group_closes_at_the_byte_bound_and_a_large_batch_stands_alone() -> None:
    groups = list(row_groups([batch(0, 10), batch(10, 10), batch(20, 1000), batch(1020, 10)], max_bytes=200))
    assert [g.num_rows for g in groups] == [20, 1000, 10]  # 10 int64 rows = 80 bytes
