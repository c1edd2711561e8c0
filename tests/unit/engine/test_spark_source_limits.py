"""Rate limits of the data source's stream, without Spark: options, offsets inside a snapshot, and the cut.

The partitions of consecutive limited batches are read with `read_partition` (what a Spark task
runs), so "every row exactly once" is checked here on a real table, batch by batch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.spark_source.limits import cut_plan, limited_end
from icetail.monitor.engine.spark_source.offsets import SnapshotPosition, StreamOffset, next_offset
from icetail.monitor.engine.spark_source.options import TriggerLimits, parse_stream_options
from icetail.monitor.engine.spark_source.partitions import plan_partitions, read_partition
from icetail.monitor.engine.verify import VerifyMode
from icetail.monitor.planning.planner import Planner
from tests.support.source_table import SourceTable, new_source_table

BASE = {"catalog": "c", "table": "ns.t"}


def test_limit_options_take_delta_s_names_and_icetail_s() -> None:
    parsed = parse_stream_options({**BASE, "maxRowsPerTrigger": "100", "max-files-per-trigger": "3"})
    assert parsed.limits == TriggerLimits(max_rows=100, max_files=3)
    assert parse_stream_options({**BASE, "MAXBYTESPERTRIGGER": "4096"}).limits.max_bytes == 4096
    assert not parse_stream_options(BASE).limits.any


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"maxRowsPerTrigger": "0"}, "option 'maxRowsPerTrigger' must be an integer >= 1, got '0'"),
        ({"max-bytes-per-trigger": "1g"}, "option 'max-bytes-per-trigger' must be an integer >= 1, got '1g'"),
        (
            {"maxFilesPerTrigger": "2", "max-files-per-trigger": "3"},
            "options 'maxFilesPerTrigger' and 'max-files-per-trigger' are the same limit; give one",
        ),
    ],
)
def test_bad_limit_options(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stream_options({**BASE, **extra})
    assert message in str(raised.value)


def test_an_offset_inside_a_snapshot_is_format_3_and_one_without_stays_format_2() -> None:
    inside = StreamOffset(42, 1_700_000_000_000, 7, SnapshotPosition(43, 2, 500, "abc"))
    raw = inside.to_json()
    assert raw["version"] == 3 and raw["position"] == {"snapshot_id": 43, "split": 2, "row": 500, "split_id": "abc"}
    assert StreamOffset.from_json(raw) == inside
    assert inside.plan_end == 43 and StreamOffset(42, None, 7).plan_end == 42
    assert StreamOffset(42, None, 7).to_json()["version"] == 2
    with pytest.raises(ConfigError, match="not an icetail offset"):
        StreamOffset.from_json({**raw, "version": 2})  # a position belongs to format 3
    with pytest.raises(ConfigError, match="not an icetail offset"):
        StreamOffset.from_json({**raw, "position": {"snapshot_id": 43}})


@pytest.fixture
def table(tmp_path: Path) -> SourceTable:
    return limited_table(tmp_path)


def limited_table(tmp_path: Path) -> SourceTable:
    """A 10-row append in one file of 4-row row groups, then two 4-row appends."""
    source = new_source_table(tmp_path / "t")
    loaded = source.load()
    with loaded.transaction() as tx:
        tx.set_properties({"write.parquet.row-group-limit": "4"})
    loaded = source.load()
    rows = [{"id": 100 + i, "v": f"b{i}", "n": float(i)} for i in range(10)]
    loaded.append(pa.Table.from_pylist(rows, loaded.schema().as_arrow()))
    source.snapshot_ids = [s.snapshot_id for s in source.load().metadata.snapshots]
    source.commit("append")
    source.commit("append")
    return source


def _batches(
    source: SourceTable, limits: TriggerLimits, verify: VerifyMode = VerifyMode.WARN, split_bytes: int | None = None
) -> list[list[tuple[Any, ...]]]:
    """The rows of each limited batch from the start, as Spark tasks would read them."""
    loaded = source.load()
    options = parse_stream_options({**source.options(), "verify": verify.value}).source
    planner = Planner(loaded, split_bytes) if split_bytes is not None else Planner(loaded)
    start = StreamOffset(None, None, 0)
    batches = []
    while True:
        whole = next_offset(loaded.metadata, start)
        end = limited_end(planner, loaded, start, whole, limits, options, None) if whole != start else start
        if end == start:
            return batches
        plan = planner.plan(start.snapshot_id, end.plan_end, ordinal_base=start.next_ordinal)
        plan, windows, cut = cut_plan(plan, start, end)
        specs = plan_partitions(loaded, plan, verify=verify, windows=windows, unchecked=cut)
        batches.append([tuple(r.values()) for spec in specs for b in read_partition(spec) for r in b.to_pylist()])
        start = StreamOffset.from_json(end.to_json())


def _rows(batches: list[list[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
    return Counter(row for batch in batches for row in batch)


def _all(source: SourceTable) -> list[list[tuple[Any, ...]]]:
    loaded = source.load()
    plan = Planner(loaded).plan(None, None)
    specs = plan_partitions(loaded, plan)
    return [[tuple(r.values()) for spec in specs for b in read_partition(spec) for r in b.to_pylist()]]


@pytest.mark.parametrize(
    ("limits", "sizes"),
    [
        (TriggerLimits(max_rows=3), [3, 3, 3, 3, 3, 3]),  # 10 rows cut at 3, 6, 9; then 1+2, 2+1, 3
        (TriggerLimits(max_rows=4), [4, 4, 4, 4, 2]),
        (TriggerLimits(max_rows=100), [18]),
        (TriggerLimits(max_files=1), [10, 4, 4]),
        (TriggerLimits(max_bytes=1), [10, 4, 4]),  # one file at least
        (TriggerLimits(max_rows=7, max_files=1), [7, 3, 4, 4]),  # the row limit cuts, the file limit ends
    ],
)
def test_limited_batches_deliver_every_row_once(table: SourceTable, limits: TriggerLimits, sizes: list[int]) -> None:
    batches = _batches(table, limits)
    assert [len(b) for b in batches] == sizes
    assert _rows(batches) == _rows(_all(table))


def test_a_file_in_several_splits_is_cut_and_resumed_across_them(table: SourceTable) -> None:
    """Splits of one row group each: estimated rows per split, a cut inside one, the next batch on from it."""
    plan = Planner(table.load(), 1).plan(None, table.snapshot_ids[0])
    assert [(s.row_group_start, s.row_group_end) for s in plan.splits] == [(0, 1), (1, 2), (2, 3)]
    batches = _batches(table, TriggerLimits(max_rows=3), split_bytes=1)
    # estimated by row-group count: rows [0,3), [3,6), [6,10) where the file has [0,4), [4,8), [8,10);
    # the estimate sets batch sizes, the positions which rows: 4 (split 0), 4 (split 1), 1 (row 8), ...
    assert [len(b) for b in batches] == [4, 4, 1, 3, 3, 3]
    assert _rows(batches) == _rows(_all(table))
    batches = _batches(table, TriggerLimits(max_files=1, max_bytes=1), split_bytes=1)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4]  # one split (row group) a batch
    assert _rows(batches) == _rows(_all(table))


def test_strict_verify_never_cuts_a_checked_snapshot(table: SourceTable) -> None:
    batches = _batches(table, TriggerLimits(max_rows=3), VerifyMode.STRICT)
    assert [len(b) for b in batches] == [10, 4, 4]
    assert _rows(batches) == _rows(_all(table))


def test_a_changed_plan_is_refused_not_misread(table: SourceTable) -> None:
    loaded = table.load()
    first = table.snapshot_ids[0]
    start = StreamOffset(None, None, 0, SnapshotPosition(first, 0, 3, "not-this-split"))
    plan = Planner(loaded).plan(None, first)
    with pytest.raises(ConfigError, match=r"names split 0 \(not-this-split\) of snapshot .* no longer has"):
        cut_plan(plan, start, StreamOffset(first, None, 1))
