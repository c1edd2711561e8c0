"""`icetail status` shows cursor, lag and the batch in flight; `reset` rewinds, abandons a batch in
flight and moves a consumer.

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.store import open_store
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    CATALOG,
    SHARED,
    Env,
    assert_sink_holds,
    icetail_here,
    run_args,
    status_here,
)
from tests.support.processes import run_icetail
from tests.support.sinks import CrashingSink, SimulatedCrash, read_parquet_sink

env = run_cli_support.env
in_process = run_cli_support.in_process


def test_status_shows_cursor_lag_and_the_batch_in_flight(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    ids = env.shared_ids
    code, _, err = icetail_here(
        capsys, *run_args(state, tmp_path / "sink", "st", SHARED, "--once", "--max-snapshots-per-batch", "2")
    )
    assert code == 0, err

    text = run_icetail(["status", "--state", state], env.child)  # one real process, the rest in this one
    assert text.returncode == 0, text.stderr
    expected = f"st: {CATALOG}.{SHARED} -> parquet://{tmp_path / 'sink'}, cursor {ids[1]}"
    assert expected in text.stdout and "lag 3 snapshots" in text.stdout, text.stdout
    report = status_here(capsys, state, "--consumer", "st")
    assert len(report) == 1
    assert report[0]["cursor_snapshot_id"] == ids[1]
    assert report[0]["current_snapshot_id"] == ids[-1]
    assert report[0]["lag_snapshots"] == 3
    assert report[0]["lag_seconds"] > 0
    assert report[0]["lease_owner"] is None and "inflight" not in report[0]
    assert report[0]["sink"] == f"parquet://{tmp_path / 'sink'}"

    # a run that dies in its first sink write leaves the next batch in flight
    config = PipelineConfig(CATALOG, SHARED, state, f"parquet://{tmp_path}/sink", consumer="st")
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="st"), 1, after_write=False)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing) as pipeline:
        pipeline.run()
    report = status_here(capsys, state)
    inflight = report[0]["inflight"]
    assert inflight["from_snapshot_exclusive"] == ids[1] and inflight["to_snapshot_inclusive"] == ids[-1]
    assert inflight["splits_done"] == 0 and inflight["rows_emitted"] == 0 and inflight["splits"] >= 3
    code, text, _ = icetail_here(capsys, "status", "--state", state)
    assert code == 0 and f"in flight {inflight['batch_id']}: 0/{inflight['splits']} splits, 0 rows" in text, text

    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink", "st"))
    assert code == 0 and "resumed" in err, err
    report = status_here(capsys, state)
    assert report[0]["cursor_snapshot_id"] == ids[-1] and report[0]["lag_snapshots"] == 0
    assert_sink_holds(tmp_path / "sink", read_changes(env.shared))


def test_reset_rewinds_and_the_next_run_delivers_again_from_there(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    ids = env.shared_ids
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink0", "rs"))
    assert code == 0, err
    assert_sink_holds(tmp_path / "sink0", read_changes(env.shared))

    for n, (to, cursor, expected_from) in enumerate(
        [(f"snapshot:{ids[2]}", ids[2], ids[2]), ("earliest", None, None), ("latest", ids[-1], ids[-1])], start=1
    ):
        with open_store(state) as store:
            generation = store.load("rs").generation  # type: ignore[union-attr]
        sink = tmp_path / f"sink{n}"  # each run's rows in their own folder: reset moves the consumer there
        code, _, err = icetail_here(
            capsys, "reset", "--state", state, "--consumer", "rs", "--to", to, "--sink", f"parquet://{sink}"
        )
        where = "before the first snapshot (the next run" if cursor is None else f"{cursor} ("
        assert code == 0 and err.splitlines()[0].startswith(f"consumer rs: cursor reset to {where}"), err
        assert err.splitlines()[1] == f"consumer rs: delivers to parquet://{sink} from its cursor on", err
        with open_store(state) as store:
            checkpoint = store.load("rs")
        assert checkpoint is not None and checkpoint.cursor.snapshot_id == cursor
        assert checkpoint.generation == generation + 1 and checkpoint.sink == f"parquet://{sink}"
        code, _, err = icetail_here(capsys, *run_args(state, sink, "rs"))
        assert code == 0, err
        if expected_from == ids[-1]:
            assert read_parquet_sink(sink) is None and "caught up" in err
        else:
            # ordinals count from the reset, as in read_changes from the same snapshot
            assert_sink_holds(sink, read_changes(env.shared, expected_from))


def test_reset_abandons_a_batch_in_flight(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    config = PipelineConfig(CATALOG, SHARED, state, f"parquet://{tmp_path}/sink", consumer="ab")
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="ab"), 2, after_write=False)
    with pytest.raises(SimulatedCrash), Pipeline(config, sink=crashing) as pipeline:
        pipeline.run()
    reset = run_icetail(["reset", "--state", state, "--consumer", "ab", "--to", f"snapshot:{env.shared_ids[1]}",
                         "--sink", f"parquet://{tmp_path / 'sink2'}"], env.child)  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    with open_store(state) as store:
        checkpoint = store.load("ab")
    assert checkpoint is not None and checkpoint.inflight is None
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink2", "ab"))
    assert code == 0, err
    assert_sink_holds(tmp_path / "sink2", read_changes(env.shared, env.shared_ids[1]))
