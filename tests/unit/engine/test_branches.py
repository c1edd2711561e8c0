"""Branches and tags on a pyiceberg-written table (no Java): every entry point, every refusal.

The table has three snapshots on main; `audit` is branched from the second and written to
with pyiceberg's `branch=` writes; tags name snapshots on both. The rows a range on the
branch must add up to are pyiceberg's own scan of the branch head (replaying the changes from
the empty table must give them), and the refusals are one line naming the refs that exist.
The Java-checked counterpart is tests/differential/test_branches.py.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from icetail.kernel.errors import BranchDroppedError, ConfigError, NotAncestorError, RefNotFoundError
from icetail.monitor.cli.main import main
from icetail.monitor.engine.api import plan_range, read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.engine.range_bounds import RangeBounds
from icetail.monitor.engine.start_mode import parse_start
from icetail.sinks.files.parquet import ParquetDirSink
from tests.support.compare import row_multiset
from tests.support.sinks import CrashingSink, SimulatedCrash, read_parquet_sink
from tests.support.small_table import SCHEMA, SmallTable


def make_branch(small_table: SmallTable) -> Any:
    """audit: branched at main's second snapshot, then an append and a delete of its own; tags on both."""
    table = small_table.load()
    first, second, _ = small_table.snapshot_ids
    with table.manage_snapshots() as manage:
        manage.create_branch(second, "audit")
        manage.create_tag(first, "start")
    table = small_table.load()
    table.append(pa.table({"id": [10, 11], "v": ["x", "y"]}, SCHEMA), branch="audit")
    table = small_table.load()
    with table.manage_snapshots() as manage:
        manage.create_tag(table.metadata.refs["audit"].snapshot_id, "audited")
    table = small_table.load()
    table.delete("id = 1", branch="audit")
    return small_table.load()


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def replay(changes: pa.Table, start: Counter[tuple[Any, ...]] | None = None) -> Counter[tuple[Any, ...]]:
    state = Counter(start or {})
    for ordinal in sorted(set(changes.column("_change_ordinal").to_pylist())):
        part = changes.filter(pc.equal(changes.column("_change_ordinal"), ordinal))
        kinds = part.column("_change_type").to_pylist()
        deletes = rows(part.filter(pa.array([k in ("DELETE", "UPDATE_BEFORE") for k in kinds])))
        inserts = rows(part.filter(pa.array([k in ("INSERT", "UPDATE_AFTER") for k in kinds])))
        assert not deletes - state, f"deletes rows not there: {deletes - state}"
        state = state - deletes + inserts
    return state


def scan(table: Any, snapshot_id: int) -> Counter[tuple[Any, ...]]:
    return rows(table.scan(snapshot_id=snapshot_id).to_arrow())


def test_read_changes_on_a_branch_and_between_tags(small_table: SmallTable, spark: Any) -> None:
    table = make_branch(small_table)
    refs = table.metadata.refs
    head = refs["audit"].snapshot_id
    changes = read_changes(table, branch="audit", spark=spark)
    assert replay(changes) == scan(table, head)
    on_branch = set(changes.column("_commit_snapshot_id").to_pylist())
    assert on_branch == {*small_table.snapshot_ids[:2], refs["audited"].snapshot_id, head}
    assert small_table.snapshot_ids[2] not in on_branch  # main's third snapshot is not on the branch
    assert replay(read_changes(table, spark=spark)) == scan(table, small_table.snapshot_ids[2])  # main unchanged
    start = refs["start"].snapshot_id
    since = read_changes(table, branch="audit", from_tag="start", spark=spark)
    assert replay(since, scan(table, start)) == scan(table, head)
    upto = read_changes(table, from_tag="start", to_tag="audited", spark=spark)
    assert replay(upto, scan(table, start)) == scan(table, refs["audited"].snapshot_id)
    plan = plan_range(table, RangeBounds(branch="audit", from_tag="start", to_tag="audited"))
    assert (plan.branch, plan.from_tag, plan.to_tag) == ("audit", "start", "audited")
    # a time on the branch resolves on its history: the newest branch snapshot at or before it
    at = table.snapshot_by_id(refs["audited"].snapshot_id).timestamp_ms
    assert plan_range(table, RangeBounds(to_timestamp_inclusive=at, branch="audit")).to_snapshot_id_inclusive == refs[
        "audited"
    ].snapshot_id


def test_bad_refs_are_one_line_naming_the_refs(small_table: SmallTable) -> None:
    table = make_branch(small_table)
    refs = re.escape("refs: main (branch), audit (branch), audited (tag), start (tag)")
    with pytest.raises(RefNotFoundError, match=rf"no branch 'nope'; {refs}; check --branch"):
        plan_range(table, RangeBounds(branch="nope"))
    with pytest.raises(RefNotFoundError, match=rf"from_tag 'nope': table ns.t has no such tag; {refs}"):
        plan_range(table, RangeBounds(from_tag="nope"))
    with pytest.raises(RefNotFoundError, match="'audited' of table ns.t is a tag, not a branch"):
        plan_range(table, RangeBounds(branch="audited"))
    with pytest.raises(RefNotFoundError, match="to_tag 'audit': 'audit' of table ns.t is a branch, not a tag"):
        plan_range(table, RangeBounds(to_tag="audit"))
    with pytest.raises(ConfigError, match=r"start of the range is given twice \(a snapshot id and a tag\)"):
        plan_range(table, RangeBounds(from_snapshot_id_exclusive=1, from_tag="start"))
    # a to-tag that is not on the from-tag's history: the existing not-ancestor error
    with pytest.raises(NotAncestorError, match="is not an ancestor"):
        plan_range(table, RangeBounds(from_tag="audited", to_tag="start"))
    assert parse_start("tag:audited").tag == "audited"
    with pytest.raises(ConfigError, match="name the tag"):
        parse_start("tag:")


def test_plan_and_changes_commands_name_the_branch(
    small_table: SmallTable, spark: Any, tmp_path: Path, capsys: Any
) -> None:
    table = make_branch(small_table)
    head = table.metadata.refs["audit"].snapshot_id
    argv = ["--catalog", "core", "--table", "ns.t", "--branch", "audit", "--from-tag", "start"]
    assert main(["plan", *argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["branch"], summary["from_tag"], summary["to_snapshot_id_inclusive"]) == ("audit", "start", head)
    assert main(["plan", *argv]) == 0
    assert "branch audit: changes in (" in capsys.readouterr().out
    out = tmp_path / "c.jsonl"
    assert main(["changes", *argv, "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["_commit_snapshot_id"] for line in lines} >= {head}
    capsys.readouterr()
    assert main(["plan", "--catalog", "core", "--table", "ns.t", "--branch", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no branch 'nope'; refs: main (branch), audit (branch)" in err[0], err


def config(tmp_path: Path, consumer: str, **options: Any) -> PipelineConfig:
    return PipelineConfig("core", "ns.t", f"sqlite:///{tmp_path}/state.db", f"parquet://{tmp_path}/{consumer}",
                          consumer=consumer, **options)  # fmt: skip


def test_run_on_a_branch_and_the_consumer_keeps_it(
    small_table: SmallTable, spark: Any, tmp_path: Path, capsys: Any
) -> None:
    table = make_branch(small_table)
    state = f"sqlite:///{tmp_path}/state.db"
    run = ["run", "--catalog", "core", "--table", "ns.t", "--state", state, "--sink", f"parquet://{tmp_path}/c",
           "--consumer", "c"]  # fmt: skip
    assert main([*run, "--branch", "audit", "--protect-cursor"]) == 0
    table = small_table.load()
    head = table.metadata.refs["audit"].snapshot_id
    assert table.metadata.refs["icetail-c"].snapshot_id == head  # --protect-cursor tags the branch's snapshot
    table.append(pa.table({"id": [12], "v": ["z"]}, SCHEMA), branch="audit")
    table.append(pa.table({"id": [99], "v": ["main"]}, SCHEMA))  # main moves too: not delivered
    capsys.readouterr()
    assert main(run) == 2  # no --branch: main, which this consumer does not follow
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "follows branch 'audit', not 'main'" in err[0], err
    assert "`icetail reset --state sqlite:///" in err[0] and "--consumer c --branch main`" in err[0], err
    assert main([*run, "--branch", "audit", "--protect-cursor"]) == 0
    table = small_table.load()
    head = table.metadata.refs["audit"].snapshot_id
    delivered = read_parquet_sink(tmp_path / "c")
    assert delivered is not None and replay(delivered) == scan(table, head)
    assert table.metadata.refs["icetail-c"].snapshot_id == head
    assert main(["status", "--state", state, "--consumer", "c"]) == 0
    assert "ns.t branch audit -> " in capsys.readouterr().out

    # the branch is dropped under the consumer: its own error naming the branch and the fix
    with table.manage_snapshots() as manage:
        manage.remove_branch("audit")
    capsys.readouterr()
    assert main([*run, "--branch", "audit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "branch 'audit' of table ns.t no longer exists" in err[0], err
    assert f"delivered up to snapshot {head}" in err[0] and "--branch main" in err[0]
    # reset --branch to an unknown branch lists the refs; to main, the next run follows main
    assert main(["reset", "--state", state, "--consumer", "c", "--branch", "audit"]) == 2
    assert "no branch 'audit'; refs: main (branch)" in capsys.readouterr().err
    assert main(["reset", "--state", state, "--consumer", "c", "--branch", "main", "--to", "tag:start"]) == 0
    with Pipeline(config(tmp_path, "c"), spark=spark) as pipeline:
        checkpoint = pipeline.checkpoint()
        assert checkpoint is not None and checkpoint.branch == "main"
        assert checkpoint.cursor.snapshot_id == table.metadata.refs["start"].snapshot_id  # --to resolves the tag
        outcomes = pipeline.run()
        assert outcomes and outcomes[-1].to_snapshot_inclusive == small_table.load().metadata.current_snapshot_id


def test_new_consumers_on_an_unknown_branch_and_at_a_tag(
    small_table: SmallTable, spark: Any, tmp_path: Path
) -> None:
    make_branch(small_table)
    with pytest.raises(RefNotFoundError, match="no branch 'audt'; refs: main"):
        Pipeline(config(tmp_path, "new", branch="audt"), spark=spark).open()
    with Pipeline(config(tmp_path, "tagged", branch="audit", start="tag:audited"), spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert len(outcomes) == 1 and outcomes[0].from_snapshot_exclusive == small_table.load().metadata.refs[
        "audited"
    ].snapshot_id
    # opened on the branch, which is dropped before the first batch: dropped, not unknown
    with Pipeline(config(tmp_path, "d", branch="audit"), spark=spark) as following:
        table = small_table.load()
        with table.manage_snapshots() as manage:
            manage.remove_branch("audit")
        with pytest.raises(BranchDroppedError, match="consumer 'd': branch 'audit' .* no longer exists"):
            following.run()


def test_a_batch_in_flight_when_the_branch_is_dropped_is_finished_first(
    small_table: SmallTable, spark: Any, tmp_path: Path
) -> None:
    """The batch was written ahead: delivering it needs no branch. The next batch reports the drop."""
    table = make_branch(small_table)
    expected = read_changes(table, branch="audit", spark=spark)
    follow = config(tmp_path, "c", branch="audit")
    sink_dir = tmp_path / "c"
    crashing = CrashingSink(ParquetDirSink(sink_dir, consumer="c"), 2, after_write=True)
    with pytest.raises(SimulatedCrash), Pipeline(follow, sink=crashing, spark=spark) as first:
        first.run()
    with table.manage_snapshots() as manage:
        manage.remove_branch("audit")
    with Pipeline(follow, spark=spark) as second:
        outcome = second.run_batch()
        assert outcome is not None and outcome.resumed and outcome.completed
        with pytest.raises(BranchDroppedError, match="no longer exists"):
            second.run_batch()
    delivered = read_parquet_sink(sink_dir)
    assert delivered is not None and row_multiset(delivered, expected.schema) == row_multiset(expected, expected.schema)
