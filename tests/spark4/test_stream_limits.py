"""Rate limits inside a snapshot: maxRowsPerTrigger / maxFilesPerTrigger / maxBytesPerTrigger on readStream.

The tables are small and the limits smaller, so a single snapshot spans several micro-batches;
each run is a Trigger.AvailableNow query into Spark's parquet file sink, compared with
`icetail.read_changes` over the same history (exactly once, `_change_ordinal` included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

import icetail
from tests.spark4.support import row_counter
from tests.spark4.test_stream_source import run_available_now, sink_rows
from tests.support.source_table import SourceTable


def big_append(table: SourceTable, rows: int = 10) -> None:
    """One snapshot of `rows` rows in one data file of row groups of 4 rows (a cut can cross them)."""
    loaded = table.load()
    with loaded.transaction() as tx:
        tx.set_properties({"write.parquet.row-group-limit": "4"})
    loaded = table.load()
    base = len(table.snapshot_ids) * 100
    data = [{"id": base + i, "v": f"b{i}", "n": i / 2} for i in range(rows)]
    loaded.append(pa.Table.from_pylist(data, loaded.schema().as_arrow()))
    table.snapshot_ids = [s.snapshot_id for s in table.load().metadata.snapshots]


def source_offsets(root: Path) -> list[dict[str, Any]]:
    logs = [p for p in (root / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    logs.sort(key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[-1]) for p in logs]


def expected(table: SourceTable, spark: Any, **kwargs: Any) -> pa.Table:
    return icetail.read_changes(table.load(), spark=spark, **kwargs)


def test_max_rows_cuts_one_snapshot_into_batches(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    big_append(source_table, 10)
    source_table.commit("append")  # 4 more rows in a second snapshot
    options = source_table.options(starting="earliest", maxRowsPerTrigger=3)
    per_batch = run_available_now(registered, options, tmp_path)
    assert per_batch == [3, 3, 3, 3, 2]  # 10 rows of one snapshot, then 4: cut at rows 3, 6, 9 and 2 of the next
    positions = [o.get("position") for o in source_offsets(tmp_path)]
    assert [p["row"] if p else None for p in positions] == [3, 6, 9, 2, None]
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected(source_table, registered))


def test_restart_from_a_checkpoint_inside_a_snapshot(
    registered: Any, source_table: SourceTable, tmp_path: Path
) -> None:
    """A query stopped after a batch that ended mid-snapshot continues it; so does a format-2 checkpoint."""
    source_table.commit("append")
    plain = source_table.options(starting="earliest")
    assert run_available_now(registered, plain, tmp_path) == [4]  # written without limits: offsets of format 2
    assert source_offsets(tmp_path)[-1]["version"] == 2
    big_append(source_table, 10)
    limited = source_table.options(starting="earliest", maxRowsPerTrigger=4)
    assert run_available_now(registered, limited, tmp_path) == [4, 4, 2]
    # stop the query after the second batch of the big snapshot: its offset is inside that snapshot
    checkpoint = tmp_path / "checkpoint"
    for log in (checkpoint / "offsets", checkpoint / "commits", tmp_path / "sink" / "_spark_metadata"):
        (log / "3").unlink()
        (log / ".3.crc").unlink(missing_ok=True)
    inside = source_offsets(tmp_path)[-1]
    assert inside["version"] == 3 and inside["position"]["row"] == 8
    for action in ("upsert", "append"):
        source_table.commit(action)
    run_available_now(registered, limited, tmp_path)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected(source_table, registered))


def test_an_update_snapshot_is_never_cut(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    """A snapshot paired by its key (delete+insert -> UPDATE_BEFORE/AFTER) is one batch, whatever the limit."""
    for action in ("append", "append", "upsert", "append"):
        source_table.commit(action)
    upsert = source_table.actions[2][1][0]
    options = source_table.options(starting="earliest", identifier_columns="id", maxRowsPerTrigger=1)
    run_available_now(registered, options, tmp_path)
    assert all(o.get("position", {}).get("snapshot_id") != upsert for o in source_offsets(tmp_path))
    got = sink_rows(registered, tmp_path)
    want = expected(source_table, registered, identifier_columns=["id"])
    assert row_counter(got) == row_counter(want)
    assert "UPDATE_AFTER" in set(got.column("_change_type").to_pylist())


def test_max_files_and_bytes_cut_between_files(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    for _ in range(3):
        source_table.commit("append")
    by_files = source_table.options(starting="earliest", maxFilesPerTrigger=2)
    files = run_available_now(registered, by_files, tmp_path / "f")
    assert files == [8, 4]
    # one byte: every batch still admits one file
    by_bytes = source_table.options(starting="earliest", max_bytes_per_trigger=1)
    size = run_available_now(registered, by_bytes, tmp_path / "b")
    assert size == [4, 4, 4]
    for root in (tmp_path / "f", tmp_path / "b"):
        assert row_counter(sink_rows(registered, root)) == row_counter(expected(source_table, registered))


def test_available_now_with_a_limit_stops_at_the_snapshot_current_at_start(
    registered: Any, source_table: SourceTable, tmp_path: Path
) -> None:
    """A snapshot committed while the limited AvailableNow run goes is left to the next run."""
    from tests.spark4.committing_source import MARKER_OPTION, CommittingChangesDataSource

    registered.dataSource.register(CommittingChangesDataSource)
    big_append(source_table, 10)
    at_start = source_table.snapshot_ids[-1]
    options = source_table.options(starting="earliest", maxRowsPerTrigger=4)
    seam = {**options, MARKER_OPTION: str(tmp_path / "committed")}
    assert run_available_now(registered, seam, tmp_path, "icetail_committing") == [4, 4, 2]
    assert (tmp_path / "committed").exists()
    source_table.snapshot_ids = [s.snapshot_id for s in source_table.load().metadata.snapshots]
    assert source_table.snapshot_ids[-1] != at_start  # committed during the run, not read by it
    first = expected(source_table, registered, to_snapshot_id_inclusive=at_start)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(first)
    assert run_available_now(registered, seam, tmp_path, "icetail_committing") == [4]
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected(source_table, registered))
