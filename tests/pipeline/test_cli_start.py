"""`--start`: where a new consumer begins (earliest, a snapshot, a timestamp, latest, full).

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.monitor.engine.api import read_changes
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    SHARED,
    Env,
    assert_full_snapshot_rows,
    assert_sink_holds,
    icetail_here,
    move_sink,
    run_args,
    small_table,
)
from tests.support.sinks import read_parquet_sink
from tests.support.tables import BASE_SCHEMA, make_rows

env = run_cli_support.env
in_process = run_cli_support.in_process


def _iso(timestamp_ms: int) -> str:
    when = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc)
    return when.isoformat(timespec="milliseconds")


@pytest.mark.parametrize("mode", ["earliest", "snapshot", "timestamp", "timestamp-before-first", "timestamp-z"])
def test_start_from_a_position(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    snapshots = env.shared.metadata.snapshots
    s2 = snapshots[1]
    start, expected_from = {
        "earliest": ("earliest", None),
        "snapshot": (f"snapshot:{s2.snapshot_id}", s2.snapshot_id),
        "timestamp": (f"timestamp:{_iso(s2.timestamp_ms)}", s2.snapshot_id),  # at S2's commit: S2 is delivered
        "timestamp-before-first": (f"timestamp:{_iso(snapshots[0].timestamp_ms - 1)}", None),
        "timestamp-z": (f"timestamp:{_iso(snapshots[2].timestamp_ms - 1).replace('+00:00', 'Z')}", s2.snapshot_id),
    }[mode]
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink", "sm", SHARED, "--start", start))
    assert code == 0, err
    assert_sink_holds(tmp_path / "sink", read_changes(env.shared, expected_from))


def test_start_latest_delivers_only_later_snapshots(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.latest")
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink", "lt", "ns.latest", "--start", "latest"))
    assert code == 0 and "caught up" in err, err
    assert read_parquet_sink(tmp_path / "sink") is None
    table.append(make_rows(BASE_SCHEMA, range(50, 55)))
    table = env.catalog.load("ns.latest")
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink", "lt", "ns.latest", "--start", "latest"))
    assert code == 0, err
    assert_sink_holds(tmp_path / "sink", read_changes(table, ids[-1]))


def test_start_full_delivers_the_current_rows_then_changes(
    env: Env, tmp_path: Path, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table, ids = small_table(env.catalog, "ns.full")
    current = table.current_snapshot()
    assert current is not None
    state = f"sqlite:///{tmp_path}/state.db"
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink1", "fl", "ns.full", "--start", "full"))
    assert code == 0, err
    got = read_parquet_sink(tmp_path / "sink1")
    assert_full_snapshot_rows(got, table)
    assert got is not None
    stamps = {int(v.timestamp() * 1000) for v in got.column("_commit_timestamp").to_pylist()}
    assert stamps == {current.timestamp_ms}

    table.append(make_rows(BASE_SCHEMA, range(60, 64)))
    table = env.catalog.load("ns.full")
    move_sink(capsys, state, "fl", tmp_path / "sink2")
    code, _, err = icetail_here(capsys, *run_args(state, tmp_path / "sink2", "fl", "ns.full", "--start", "full"))
    assert code == 0, err
    later = read_changes(table, ids[-1])  # ordinal 0 there; in the consumer's stream it follows the full scan
    ordinal = later.schema.get_field_index("_change_ordinal")
    later = later.set_column(ordinal, later.schema.field(ordinal), pa.array([1] * later.num_rows, pa.int32()))
    assert_sink_holds(tmp_path / "sink2", later)
