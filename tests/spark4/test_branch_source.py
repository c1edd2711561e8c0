"""The data source on a branch: `branch`, `from-tag`, `to-tag` and `starting tag:NAME`, batch and stream.

Expected rows are `icetail.read_changes` with the same branch and tags (checked against Java's
reads of the branch in tests/differential/test_branches.py). The stream follows the branch
across restarts and reports a branch dropped under it with its own one-line error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icetail
from tests.spark4.support import load_df, row_counter
from tests.spark4.test_stream_source import run_available_now, sink_rows
from tests.support.source_table import SourceTable


def branch_append(source: SourceTable, first_id: int) -> int:
    """One append on `audit`; returns the branch's new head."""
    table = source.load()
    rows = [{"id": first_id + i, "v": f"audit-{first_id}", "n": float(i)} for i in range(3)]
    table.append(pa.Table.from_pylist(rows, table.schema().as_arrow()), branch="audit")
    return int(source.load().metadata.refs["audit"].snapshot_id)


@pytest.fixture
def branched(source_table: SourceTable) -> SourceTable:
    """main: append, append, delete, then one more append after `audit` forks at the delete;
    audit: two appends of its own, tag `audited` after the first, tag `forked` at the fork."""
    for action in ("append", "append", "delete"):
        source_table.commit(action)
    table = source_table.load()
    with table.manage_snapshots() as manage:
        manage.create_branch(source_table.snapshot_ids[-1], "audit")
        manage.create_tag(source_table.snapshot_ids[-1], "forked")
    first = branch_append(source_table, 900)
    table = source_table.load()
    with table.manage_snapshots() as manage:
        manage.create_tag(first, "audited")
    branch_append(source_table, 950)
    source_table.commit("append")  # main moves on
    return source_table


def test_batch_reads_on_a_branch_and_between_tags(registered: Any, branched: SourceTable) -> None:
    table = branched.load()
    cases = [
        ({"branch": "audit"}, {"branch": "audit"}),
        ({"branch": "audit", "from-tag": "forked"}, {"branch": "audit", "from_tag": "forked"}),
        ({"from-tag": "forked", "to-tag": "audited"}, {"from_tag": "forked", "to_tag": "audited"}),
        ({}, {}),
    ]
    for options, api in cases:
        got = load_df(registered, branched.options(**{k.replace("-", "_"): v for k, v in options.items()}))
        expected = icetail.read_changes(table, spark=registered, **api)
        assert got.num_rows == expected.num_rows > 0, options
        assert row_counter(got) == row_counter(expected), options
    on_branch = load_df(registered, branched.options(branch="audit"))
    assert 900 in on_branch.column("id").to_pylist() and table.metadata.current_snapshot_id not in set(
        on_branch.column("_commit_snapshot_id").to_pylist()
    )
    with pytest.raises(Exception, match=r"no branch 'nope'; refs: main \(branch\), audit \(branch\)"):
        load_df(registered, branched.options(branch="nope"))
    with pytest.raises(Exception, match="options 'to-snapshot' and 'to-tag' exclude each other"):
        load_df(registered, branched.options(to_tag="audited", to_snapshot="1"))


def test_stream_follows_the_branch_across_restarts_and_names_a_dropped_branch(
    registered: Any, branched: SourceTable, tmp_path: Path
) -> None:
    options = branched.options(branch="audit", starting="tag:forked")
    run_available_now(registered, options, tmp_path)
    expected = icetail.read_changes(branched.load(), branch="audit", from_tag="forked", spark=registered)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(expected)
    branch_append(branched, 990)
    branched.commit("append")  # main: not in the stream
    run_available_now(registered, options, tmp_path)
    expected = icetail.read_changes(branched.load(), branch="audit", from_tag="forked", spark=registered)
    got = sink_rows(registered, tmp_path)
    assert got.num_rows == expected.num_rows and row_counter(got) == row_counter(expected)

    # a running query whose branch is dropped between triggers stops with the dropped-branch error
    query = (
        registered.readStream.format("icetail").options(**options).load()
        .writeStream.format("parquet").option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    )  # fmt: skip
    try:
        query.processAllAvailable()
        table = branched.load()
        with table.manage_snapshots() as manage:
            manage.remove_branch("audit")
        with pytest.raises(Exception, match="branch 'audit' of table ns.t no longer exists.*recreate the branch"):
            query.awaitTermination()
    finally:
        query.stop()
    # restarted on the dropped branch, load() names the branch and the refs that exist
    with pytest.raises(Exception, match=r"no branch 'audit'; refs: main \(branch\), audited \(tag\)"):
        registered.readStream.format("icetail").options(**options).load()
