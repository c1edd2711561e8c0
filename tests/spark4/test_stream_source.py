"""spark.readStream.format('icetail') into Spark's parquet file sink: exact across restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import icetail
from tests.spark4.support import row_counter
from tests.support.source_table import SourceTable


def run_available_now(spark: Any, options: dict[str, str], root: Path, source: str = "icetail") -> list[int]:
    """One Trigger.AvailableNow run on the checkpoint under `root`, into the parquet sink there; the
    input rows of each non-empty micro-batch."""
    query = (
        spark.readStream.format(source)
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(root / "sink"))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return [p.numInputRows for p in query.recentProgress if p.numInputRows]


def sink_rows(spark: Any, root: Path) -> pa.Table:
    return spark.read.parquet(str(root / "sink")).toArrow()  # through the sink's metadata log


def batches_committed(root: Path) -> int:
    return len([p for p in (root / "checkpoint" / "commits").iterdir() if p.name.isdigit()])


def test_restart_adds_exactly_the_new_changes(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    for action in ("append", "append", "delete", "upsert"):
        source_table.commit(action)
    options = source_table.options(starting="earliest")
    run_available_now(registered, options, tmp_path)
    first = sink_rows(registered, tmp_path)
    assert row_counter(first) == row_counter(icetail.read_changes(source_table.load(), spark=registered))

    run_available_now(registered, options, tmp_path)  # nothing new: nothing added
    assert sink_rows(registered, tmp_path).num_rows == first.num_rows

    for action in ("append", "overwrite", "delete"):
        source_table.commit(action)
    run_available_now(registered, options, tmp_path)
    # the whole stream equals `icetail changes` over the whole history, _change_ordinal included
    expected = icetail.read_changes(source_table.load(), spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)


def test_a_checkpoint_of_the_previous_offset_format_continues_exactly(
    registered: Any, source_table: SourceTable, tmp_path: Path
) -> None:
    """Offsets written before they carried a version (format 1) are continued after an upgrade."""
    import json

    for action in ("append", "append", "delete"):
        source_table.commit(action)
    options = source_table.options(starting="earliest")
    run_available_now(registered, options, tmp_path)
    logs = [p for p in (tmp_path / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    assert logs
    for path in logs:  # rewrite the checkpoint as the previous release left it
        *head, source_offset = path.read_text().splitlines()
        raw = json.loads(source_offset)
        assert raw.pop("version") == 2
        path.write_text("\n".join([*head, json.dumps(raw)]))
    for action in ("upsert", "append"):
        source_table.commit(action)
    run_available_now(registered, options, tmp_path)
    expected = icetail.read_changes(source_table.load(), spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)


def test_max_snapshots_per_trigger_cuts_batches(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    for _ in range(5):
        source_table.commit("append")
    options = source_table.options(starting="earliest", max_snapshots_per_trigger=2)
    run_available_now(registered, options, tmp_path)
    assert batches_committed(tmp_path) == 3  # 2 + 2 + 1 snapshots
    per_batch = _snapshots_per_batch(tmp_path)
    assert per_batch == [2, 2, 1]
    expected = icetail.read_changes(source_table.load(), spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)


def test_starting_after_a_snapshot(registered: Any, source_table: SourceTable, tmp_path: Path) -> None:
    for _ in range(3):
        source_table.commit("append")
    first = source_table.snapshot_ids[0]
    run_available_now(registered, source_table.options(starting=f"snapshot:{first}"), tmp_path)
    expected = icetail.read_changes(source_table.load(), first, spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)


def _snapshots_per_batch(root: Path) -> list[int]:
    """Snapshots each batch covered, from the checkpoint's offset log (start of batch n = end of n-1)."""
    import json

    ordinals = [0]
    logs = [p for p in (root / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    offsets = sorted(logs, key=lambda p: int(p.name))
    for path in offsets:
        source_offset = json.loads(path.read_text().splitlines()[-1])
        ordinals.append(source_offset["next_ordinal"])
    return [b - a for a, b in zip(ordinals, ordinals[1:], strict=False)]


def test_without_admission_control_restart_is_exact(
    registered: Any, source_table: SourceTable, tmp_path: Path
) -> None:
    """Spark 4.0/4.1's protocol (no start in latestOffset): limit and ordinals from the reader's own offsets."""
    from tests.spark4.legacy_source import LegacyChangesDataSource

    registered.dataSource.register(LegacyChangesDataSource)
    for _ in range(3):
        source_table.commit("append")
    options = source_table.options(starting="earliest", max_snapshots_per_trigger=2)
    run_available_now(registered, options, tmp_path, "icetail_legacy")
    for action in ("delete", "append", "upsert", "append", "append"):
        source_table.commit(action)
    run_available_now(registered, options, tmp_path, "icetail_legacy")
    expected = icetail.read_changes(source_table.load(), spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)
    # AvailableNow on the old protocol: Spark asks once for its target, so the restart reads all new snapshots
    assert _snapshots_per_batch(tmp_path) == [3, len(source_table.snapshot_ids) - 3], _dump(tmp_path)


def _dump(root: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((root / "checkpoint" / "offsets").iterdir()) if p.name.isdigit())


def test_a_stream_starts_at_delta_s_starting_timestamp(
    registered: Any, source_table: SourceTable, tmp_path: Path
) -> None:
    """readStream's `startingTimestamp` (Delta's name): the snapshots committed at or after it."""
    import datetime
    import time

    for action in ("append", "append", "delete"):
        source_table.commit(action)
        time.sleep(0.01)
    at = [s.timestamp_ms for s in source_table.load().metadata.snapshots]
    start = datetime.datetime.fromtimestamp(at[1] / 1000, tz=datetime.timezone.utc).isoformat(timespec="milliseconds")
    run_available_now(registered, source_table.options(startingTimestamp=start), tmp_path)
    expected = icetail.read_changes(source_table.load(), spark=registered, from_timestamp_inclusive=at[1])
    assert set(expected.column("_commit_snapshot_id").to_pylist()) == set(source_table.snapshot_ids[1:])
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)
