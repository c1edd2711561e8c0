"""A consumer whose cursor is gone (an expired snapshot, a rollback): named in one line, and
`--on-missing-cursor` recovers it.

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    CATALOG,
    Env,
    assert_full_snapshot_rows,
    assert_one_line_error,
    assert_sink_holds,
    dump_state,
    icetail_here,
    move_sink,
    run_args,
    small_table,
)
from tests.support.compare import row_multiset
from tests.support.processes import run_icetail
from tests.support.sinks import SimulatedCrash, read_parquet_sink
from tests.support.tables import BASE_SCHEMA, make_rows

env = run_cli_support.env
in_process = run_cli_support.in_process


def test_expired_cursor_fails_naming_it_and_latest_recovers(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.expiring")
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(
        capsys, *run_args(state, tmp_path / "sink0", "exp", "ns.expiring", "--once", "--max-snapshots-per-batch", "2")
    )
    assert code == 0, err
    table.maintenance.expire_snapshots().by_id(ids[1]).commit()  # the cursor snapshot S2
    table = env.catalog.load("ns.expiring")
    assert table.metadata.snapshot_by_id(ids[1]) is None

    move_sink(capsys, state, "exp", tmp_path / "sink1")
    before = dump_state(state)
    failed = run_icetail(run_args(state, tmp_path / "sink1", "exp", "ns.expiring"), env.child)
    line = assert_one_line_error(failed, 2, str(ids[1]), "expired", "--on-missing-cursor")
    for choice in ("earliest", "latest", "full"):
        assert choice in line
    assert dump_state(state) == before

    recovered = run_icetail(
        run_args(state, tmp_path / "sink1", "exp", "ns.expiring", "--on-missing-cursor", "latest"), env.child
    )
    assert recovered.returncode == 0, recovered.stderr
    with open_store(state) as store:
        checkpoint = store.load("exp")
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == ids[-1]
    assert read_parquet_sink(tmp_path / "sink1") is None  # latest: nothing delivered

    table.append(make_rows(BASE_SCHEMA, range(100, 104)))
    table = env.catalog.load("ns.expiring")
    move_sink(capsys, state, "exp", tmp_path / "sink2")
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink2", "exp", "ns.expiring"))
    assert code == 0, err
    assert_sink_holds(tmp_path / "sink2", read_changes(table, ids[-1]))


def test_rolled_back_cursor_fails_naming_it(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.rolled")
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink0", "rb", "ns.rolled"))
    assert code == 0, err
    table.manage_snapshots().rollback_to_snapshot(ids[1]).commit()
    move_sink(capsys, state, "rb", tmp_path / "sink1")
    before = dump_state(state)
    failed = run_icetail(run_args(state, tmp_path / "sink1", "rb", "ns.rolled"), env.child)
    line = assert_one_line_error(failed, 2, str(ids[-1]), "rollback")
    assert "--on-missing-cursor diff" in line and "expired" not in line
    assert dump_state(state) == before

    # asked for, the rollback is delivered as changes: the rows it removed are DELETEs (20..29), the rows
    # it brought back INSERTs (0..2, deleted at snapshot 3), in one collapsed batch
    table = env.catalog.load("ns.rolled")
    code, _, err = icetail_here(
        capsys, *run_args(state, tmp_path / "sink1", "rb", "ns.rolled", "--on-missing-cursor", "diff")
    )
    assert code == 0, err
    assert "collapsed history" in err
    got = read_parquet_sink(tmp_path / "sink1")
    assert got is not None
    data = [f.name for f in BASE_SCHEMA]
    at_cursor = row_multiset(table.scan(snapshot_id=ids[-1]).to_arrow(), BASE_SCHEMA)
    now = row_multiset(table.scan().to_arrow(), BASE_SCHEMA)
    deletes = got.filter(pc.equal(got.column("_change_type"), "DELETE")).select(data)
    inserts = got.filter(pc.equal(got.column("_change_type"), "INSERT")).select(data)
    assert row_multiset(deletes, BASE_SCHEMA) == at_cursor - now and len(at_cursor - now) == 10
    assert row_multiset(inserts, BASE_SCHEMA) == now - at_cursor and len(now - at_cursor) == 3
    assert deletes.num_rows + inserts.num_rows == got.num_rows
    assert set(got.column("_commit_snapshot_id").to_pylist()) == {ids[1]}
    with open_store(state) as store:
        checkpoint = store.load("rb")
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == ids[1]


def crash_after_cursor_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipelines die right after `--on-missing-cursor` moved the cursor, before the batch is written ahead."""
    from icetail.monitor.engine.next_batch import NextBatch

    recover = NextBatch._recover_cursor

    def dying(self: NextBatch, table: Table, problem: Any, policy: str) -> Any:
        recover(self, table, problem, policy)
        raise SimulatedCrash("after the cursor reset")

    monkeypatch.setattr(NextBatch, "_recover_cursor", dying)


@pytest.mark.parametrize(
    "crash",
    [
        pytest.param(False, id="no-crash"),
        pytest.param(
            True,
            id="crash-after-reset",
        ),
    ],
)
def test_on_missing_cursor_full_delivers_the_current_snapshot(
    env: Env,
    tmp_path: Path,
    in_process: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    crash: bool,
) -> None:
    ident = f"ns.fullpolicy{int(crash)}"
    table, ids = small_table(env.catalog, ident)
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(
        capsys, *run_args(state, tmp_path / "sink0", "fp", ident, "--once", "--max-snapshots-per-batch", "2")
    )
    assert code == 0, err
    table.maintenance.expire_snapshots().by_id(ids[1]).commit()
    table = env.catalog.load(ident)
    move_sink(capsys, state, "fp", tmp_path / "sink1")
    args = run_args(state, tmp_path / "sink1", "fp", ident, "--on-missing-cursor", "full")
    if crash:
        config = PipelineConfig(CATALOG, ident, state, f"parquet://{tmp_path}/sink1", consumer="fp",
                                on_missing_cursor="full")  # fmt: skip
        with monkeypatch.context() as patch, pytest.raises(SimulatedCrash), Pipeline(config) as dying:
            crash_after_cursor_reset(patch)
            dying.run()
    code, _, err = icetail_here(capsys, *args)
    assert code == 0, err
    assert_full_snapshot_rows(read_parquet_sink(tmp_path / "sink1"), table)
