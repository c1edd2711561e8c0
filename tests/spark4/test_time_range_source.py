"""Time bounds of the data source's batch reads: `from-timestamp`/`to-timestamp`, and Delta's names
`startingTimestamp`/`endingTimestamp` for the same inclusive bounds (issue 25)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

import icetail
from tests.spark4.support import load_df, row_counter
from tests.support.source_table import SourceTable


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="milliseconds")


def test_time_bounds_and_delta_names(registered: Any, source_table: SourceTable) -> None:
    for action in ("append", "append", "delete", "append"):
        source_table.commit(action)
        time.sleep(0.01)
    table = source_table.load()
    at = [s.timestamp_ms for s in table.metadata.snapshots]
    start, end = _iso(at[1]), _iso(at[2])  # the second and third snapshots, both ends inclusive
    expected = icetail.read_changes(
        table, spark=registered, from_timestamp_inclusive=at[1], to_timestamp_inclusive=at[2]
    )
    assert set(expected.column("_commit_snapshot_id").to_pylist()) == set(source_table.snapshot_ids[1:3])
    for options in (
        {"from-timestamp": start, "to-timestamp": end},
        {"startingTimestamp": start, "endingTimestamp": end},
    ):
        got = load_df(registered, source_table.options(**options))
        assert row_counter(got) == row_counter(expected), options
    assert load_df(registered, source_table.options(endingTimestamp=_iso(at[0] - 1))).num_rows == 0


def test_two_starts_are_refused(registered: Any, source_table: SourceTable) -> None:
    source_table.commit("append")
    options = source_table.options(startingTimestamp="2026-01-01", **{"from-snapshot": source_table.snapshot_ids[0]})
    with pytest.raises(Exception, match="options 'from-snapshot' and 'startingTimestamp' exclude each other"):
        load_df(registered, options)


def test_a_row_filter_reads_as_the_python_api(registered: Any, source_table: SourceTable) -> None:
    """Option `filter`: the same rows as `read_changes(row_filter=)`; a bad one fails at load()."""
    for action in ("append", "append", "delete", "append"):
        source_table.commit(action)
    table = source_table.load()
    expected = icetail.read_changes(table, spark=registered, row_filter="id < 3 or id >= 31")
    unfiltered = icetail.read_changes(table, spark=registered)
    assert 0 < expected.num_rows < unfiltered.num_rows
    got = load_df(registered, source_table.options(filter="id < 3 or id >= 31"))
    assert row_counter(got) == row_counter(expected)
    with pytest.raises(Exception, match="option 'filter' 'nosuch = 1' does not fit"):
        load_df(registered, source_table.options(filter="nosuch = 1"))


def test_spark_changelog_option_names(registered: Any, source_table: SourceTable) -> None:
    """Spark 4.2's `spark.read.changes` options, where they mean what icetail does: versions are
    snapshot ids, both bounds inclusive unless `starting/endingBoundInclusive=false`, and
    `deduplicationMode` none / dropCarryovers / netChanges."""
    for action in ("append", "upsert", "delete", "append"):
        source_table.commit(action)
    table = source_table.load()
    ids = source_table.snapshot_ids

    def same(options: dict[str, Any], **expected: Any) -> None:
        got = load_df(registered, source_table.options(**options))
        want = icetail.read_changes(table, spark=registered, **expected)
        assert row_counter(got) == row_counter(want), options

    same({"startingVersion": ids[1], "endingVersion": ids[2]}, from_snapshot_id_exclusive=ids[0],
         to_snapshot_id_inclusive=ids[2])  # fmt: skip
    same({"startingVersion": ids[0]}, from_snapshot_id_exclusive=None)  # the first snapshot: everything
    same({"startingVersion": ids[1], "startingBoundInclusive": "false"}, from_snapshot_id_exclusive=ids[1])
    same({"endingVersion": ids[3], "endingBoundInclusive": "false"}, to_snapshot_id_inclusive=ids[2])
    same({"deduplicationMode": "netChanges"}, net=True)
    same({"deduplicationMode": "none"}, carry_over_removal=False)
    same({"deduplicationMode": "dropCarryovers", "computeUpdates": "true"})
    for options, message in (
        ({"computeUpdates": "false"}, "option 'computeUpdates' false is not supported"),
        ({"startingBoundInclusive": "false"}, "option 'startingBoundInclusive' bounds 'startingVersion'"),
        ({"deduplicationMode": "latest"}, "is not one of: none, dropCarryovers, netChanges"),
        ({"startingVersion": ids[1], "from-snapshot": ids[0]}, "exclude each other"),
    ):
        with pytest.raises(Exception, match=message):
            load_df(registered, source_table.options(**options))
