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
