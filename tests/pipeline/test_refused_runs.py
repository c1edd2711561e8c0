"""A run that exits with an error leaves the checkpoint store as it found it, and every hint works
when pasted (issue 22.3 and 22.4).

The reported case: the cursor's snapshot expired and so did the oldest history; `run
--on-missing-cursor earliest` exited 2 but had already moved the cursor to "before the first
snapshot", after which `--on-missing-cursor full` failed the same way and no documented command
recovered the consumer. pyiceberg's expiry (which clears the parent id of the oldest kept
snapshot) makes that table here without Java, so this runs on both Spark lines.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from icetail.kernel.errors import IcetailError
from icetail.monitor.engine.api import read_changes
from icetail.monitor.planning.lineage import HistoryExpiredError
from icetail.state.checkpoint import Cursor
from icetail.state.store import open_store
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    Env,
    assert_one_line_error,
    dump_state,
    icetail_here,
    run_args,
    small_table,
)
from tests.support.processes import run_icetail
from tests.support.sinks import read_parquet_sink

# the fixtures of run_cli_support: one catalog with the shared table, icetail run in this process
env = run_cli_support.env
in_process = run_cli_support.in_process


def _pasted(line: str, command: str) -> list[str]:
    """The arguments of the backquoted `icetail COMMAND ...` hint in `line`, as a shell splits them."""
    start = line.index(f"`icetail {command} ")
    return shlex.split(line[start + 1 : line.index("`", start + 1)])[1:]


def test_refused_recovery_leaves_the_state_and_the_documented_paths_recover(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.truncated")
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    code, _, err = icetail_here(
        capsys, *run_args(state, sink, "tr", "ns.truncated", "--once", "--max-snapshots-per-batch", "2")
    )
    assert code == 0, err
    # the cursor snapshot S2 and everything before it expire: the oldest kept snapshot is S3
    table.maintenance.expire_snapshots().by_ids(ids[:2]).commit()
    table = env.catalog.load("ns.truncated")
    before = dump_state(state)

    for policy in ("fail", "earliest"):
        refused = run_icetail(run_args(state, sink, "tr", "ns.truncated", "--on-missing-cursor", policy), env.child)
        line = assert_one_line_error(refused, 2)
        assert "--from-snapshot" not in line  # `run` has no such flag
        assert dump_state(state) == before, f"--on-missing-cursor {policy} changed the state"
    assert f"snapshot {ids[2]}" in line and "has expired" in line and "--on-missing-cursor full" in line

    # the hint the refusal printed works when pasted: a reset onto the oldest kept snapshot
    reset = run_icetail(_pasted(line, "reset"), env.child)
    assert reset.returncode == 0, reset.stderr
    with open_store(state) as store:
        checkpoint = store.load("tr")
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == ids[2]


def test_full_and_latest_recover_from_where_a_refused_run_left_the_consumer(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.truncated2")
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(
        capsys, *run_args(state, tmp_path / "s0", "tr", "ns.truncated2", "--once", "--max-snapshots-per-batch", "2")
    )
    assert code == 0, err
    table.maintenance.expire_snapshots().by_ids(ids[:2]).commit()
    table = env.catalog.load("ns.truncated2")
    refused = run_icetail(
        run_args(state, tmp_path / "s0", "tr", "ns.truncated2", "--on-missing-cursor", "earliest"), env.child
    )
    assert refused.returncode == 2
    # a consumer reset to before the first snapshot meets the same expired history, and full answers it too
    code, _, err = icetail_here(capsys, "reset", "--state", state, "--consumer", "tr", "--to", "earliest")
    assert code == 0, err
    for policy, sink in (("fail", "s1"), ("earliest", "s1"), ("full", "s1")):
        code, _, err = icetail_here(
            capsys, "reset", "--state", state, "--consumer", "tr", "--sink", f"parquet://{tmp_path}/{sink}"
        )
        assert code == 0, err
        code, _, err = icetail_here(
            capsys, *run_args(state, tmp_path / sink, "tr", "ns.truncated2", "--on-missing-cursor", policy)
        )
        if policy != "full":
            assert code == 2 and "--on-missing-cursor full" in err, err
            continue
        assert code == 0, err
    got = read_parquet_sink(tmp_path / "s1")
    assert got is not None
    assert sorted(got.column("id").to_pylist()) == sorted(table.scan().to_arrow().column("id").to_pylist())
    assert set(got.column("_change_type").to_pylist()) == {"INSERT"}
    with open_store(state) as store:
        checkpoint = store.load("tr")
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == ids[-1]


def test_a_new_consumer_on_an_expired_history_is_not_given_a_silent_gap(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """From before the first snapshot, a truncated history would lose the rows the oldest kept
    snapshot inherited (its summary says it holds more than it added): refused, not read."""
    table, ids = small_table(env.catalog, "ns.truncated3")
    table.maintenance.expire_snapshots().by_ids(ids[:2]).commit()
    table = env.catalog.load("ns.truncated3")
    with pytest.raises(HistoryExpiredError, match=f"--from-snapshot {ids[2]}"):
        read_changes(table)
    assert read_changes(table, ids[2]).num_rows > 0  # the hint of `changes` and the API works
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "s", "new", "ns.truncated3"))
    assert code == 2 and "--on-missing-cursor full" in err and "--from-snapshot" not in err, err
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "s", "new", "ns.truncated3", "--start", "full"))
    assert code == 0, err
    got = read_parquet_sink(tmp_path / "s")
    assert got is not None and got.num_rows == table.scan().to_arrow().num_rows


def test_sink_and_branch_hints_name_the_store_and_work_when_pasted(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "a", "hint", "ns.shared", "--start", "latest"))
    assert code == 0, err
    refused = run_icetail(run_args(state, tmp_path / "b", "hint"), env.child)
    line = assert_one_line_error(refused, 2, "delivers to")
    args = _pasted(line, "reset")
    assert args[:4] == ["reset", "--state", state, "--consumer"]
    pasted = run_icetail([a if a != "..." else "latest" for a in args], env.child)
    assert pasted.returncode == 0, pasted.stderr
    again = run_icetail(run_args(state, tmp_path / "b", "hint"), env.child)
    assert again.returncode == 0, again.stderr
    branch = run_icetail([*run_args(state, tmp_path / "b", "hint"), "--branch", "audit"], env.child)
    line = assert_one_line_error(branch, 2, "follows branch 'main'")
    assert _pasted(line, "reset")[:3] == ["reset", "--state", state]


def test_a_first_run_whose_sink_cannot_open_records_nothing(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    blocker = tmp_path / "file"
    blocker.write_text("a file where the sink's folder would go")
    bad_sink = f"parquet://{blocker}/sink"
    failed = run_icetail(run_args(state, bad_sink, "first", "ns.shared", "--start", "latest"), env.child)
    assert_one_line_error(failed, 2, "parquet sink directory")
    assert dump_state(state) == []  # no consumer, no sink recorded
    # the corrected command is not refused, and its own --start decides where the consumer begins
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink", "first", "ns.shared"))
    assert code == 0, err
    with open_store(state) as store:
        checkpoint = store.load("first")
    assert checkpoint is not None and checkpoint.sink == f"parquet://{tmp_path / 'sink'}"
    got = read_parquet_sink(tmp_path / "sink")
    assert got is not None and got.num_rows == read_changes(env.shared).num_rows  # earliest, not latest


def test_a_consumer_that_began_a_batch_is_never_forgotten(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/state.db") as store:
        store.ensure_consumer("c", "cat", "ns.t", Cursor.before_first_snapshot())
        store.acquire_lease("c", "me", 60)
        with pytest.raises(IcetailError):  # only the run holding the lease may forget it
            store.forget_unstarted("c", owner="other")
        assert store.load("c") is not None
        store.reset_cursor("c", Cursor(1, 1), owner="me")  # generation 1: it has a history of its own
        assert store.forget_unstarted("c", owner="me") is False
        assert store.load("c") is not None
        store.ensure_consumer("d", "cat", "ns.t", Cursor.before_first_snapshot())
        store.acquire_lease("d", "me", 60)
        assert store.forget_unstarted("d", owner="me") is True
        assert store.load("d") is None
