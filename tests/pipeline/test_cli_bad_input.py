"""`icetail run`, `status` and `reset` refuse bad input: exit 2, one line on stderr, nothing on stdout,
the checkpoint store exactly as before (checked in real child processes: no Spark starts on those paths).

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    CATALOG,
    SHARED,
    Env,
    assert_one_line_error,
    assert_sink_holds,
    dump_state,
    icetail_here,
    run_args,
    small_table,
    with_flags,
)
from tests.support.processes import run_icetail
from tests.support.sinks import read_parquet_sink

env = run_cli_support.env
in_process = run_cli_support.in_process
seeded_state = run_cli_support.seeded_state  # base_state copies it
base_state = run_cli_support.base_state


BAD_RUNS: list[Any] = [
    pytest.param(["--catalog", "nosuch"], ("nosuch",), id="unknown-catalog"),
    pytest.param(["--table", "ns.nosuch"], ("ns.nosuch",), id="unknown-table"),
    pytest.param(["--table", "nosuch"], ("NAMESPACE.TABLE",), id="table-without-namespace"),
    pytest.param(["--start", "yesterday", "--consumer", "fresh"], ("yesterday", "earliest"), id="bad-start"),
    pytest.param(
        ["--start", "timestamp:yesterday", "--consumer", "fresh"],
        ("timestamp:yesterday", "ISO 8601", "timestamp:2026-01-31T12:00:00Z"),
        id="bad-start-timestamp",
    ),
    pytest.param(["--catalog", "nosuch", "--consumer", "fresh"], ("'nosuch' is not configured",), id="new-catalog"),
    pytest.param(["--sink", "parquet://s3://bucket/changes"], ("s3://", "local filesystem only"), id="sink-s3"),
    pytest.param(["--sink", "jsonl://gs://bucket/c.jsonl"], ("gs://", "local filesystem only"), id="sink-jsonl-gs"),
    pytest.param(["--sink", "iceberg://s3://bucket/t"], ("s3://", "catalog and a table"), id="sink-iceberg-s3"),
    pytest.param(["--sink", "parquet://~/changes"], ("~ is not expanded",), id="sink-tilde"),
    pytest.param(["--state", "sqlite:///~/state.db"], ("~ is not expanded",), id="state-tilde"),
    pytest.param(["--start", "snapshot:12345", "--consumer", "fresh"], ("12345",), id="start-snapshot-unknown"),
    pytest.param(["--chunk-rows", "0"], ("--chunk-rows",), id="chunk-rows-0"),
    pytest.param(["--max-snapshots-per-batch", "0"], ("--max-snapshots-per-batch",), id="max-snapshots-0"),
    pytest.param(["--once", "--until-caught-up"], ("--once",), id="once-and-until-caught-up"),
    pytest.param(["--state", "mysql://db/x"], ("mysql://db/x", "sqlite:///"), id="state-url-scheme"),
    pytest.param(["--state", "sqlite://host/x.db"], ("sqlite://host/x.db",), id="state-url-host"),
    pytest.param(["--state", "postgresql://u@h/db?schema=Bad-Name"], ("schema",), id="state-url-pg-schema"),
]


@pytest.mark.parametrize(("flags", "fragments"), BAD_RUNS)
def test_run_bad_input(env: Env, base_state: str, tmp_path: Path, flags: list[str], fragments: tuple[str, ...]) -> None:
    before = dump_state(base_state)
    result = run_icetail(with_flags(run_args(base_state, tmp_path / "sink", "base"), flags), env.child, cwd=tmp_path)
    line = assert_one_line_error(result, 2, *fragments)
    assert "--uri" not in line  # pyiceberg's advice names a flag of its own CLI, not ours
    assert dump_state(base_state) == before
    assert read_parquet_sink(tmp_path / "sink") is None
    assert {p.name for p in tmp_path.iterdir()} <= {"base-state.db", "sink"}  # no ./s3:/bucket or ./~ folder


BAD_SINKS = [
    pytest.param("ftp://nowhere", ("ftp://nowhere", "parquet://"), id="scheme"),
    pytest.param("parquet://", ("parquet://",), id="no-path"),
    pytest.param("iceberg://nocatalog", ("iceberg://nocatalog",), id="iceberg-no-table"),
]


@pytest.mark.parametrize(("sink", "fragments"), BAD_SINKS)
def test_run_bad_sink_url(
    base_state: str, in_process: None, capsys: pytest.CaptureFixture[str], sink: str, fragments: tuple[str, ...]
) -> None:
    """In this process: with the bug, the error only comes after Spark read the batch (a child would take ~30 s)."""
    before = dump_state(base_state)
    code, out, err = icetail_here(capsys, *run_args(base_state, sink, "base"))
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert err.startswith("icetail: error: ") and all(f in err for f in fragments), err
    assert dump_state(base_state) == before


def test_run_bad_sink_url_is_refused_even_with_nothing_to_deliver(env: Env, tmp_path: Path) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    result = run_icetail(run_args(state, "ftp://nowhere", "late", SHARED, "--start", "latest"), env.child)
    if result.returncode == 0:
        pytest.fail("bug: a bad sink URL is accepted (exit 0, consumer created) when there is nothing to deliver")
    assert_one_line_error(result, 2, "ftp://nowhere")
    assert dump_state(state) == []


def test_the_session_starts_only_for_a_batch_and_then_overlaps_its_planning(
    env: Env, tmp_path: Path, spark: Any
) -> None:
    """A cron-style run with nothing to deliver starts no JVM; one with a batch starts it on a thread and delivers.

    A JVM started by a child prints `Picked up JDK_JAVA_OPTIONS` (child_env's fast-JIT flag).
    """
    state = f"sqlite:///{tmp_path}/state.db"
    idle = run_icetail(run_args(state, tmp_path / "idle", "idle", SHARED, "--start", "latest"), env.child)
    assert idle.returncode == 0 and "caught up" in idle.stderr, idle.stderr
    assert "JDK_JAVA_OPTIONS" not in idle.stderr, f"a JVM started with nothing to deliver:\n{idle.stderr}"
    busy = run_icetail(run_args(state, tmp_path / "busy", "busy", SHARED, "--start", "earliest"), env.child)
    assert busy.returncode == 0 and "JDK_JAVA_OPTIONS" in busy.stderr, busy.stderr
    assert_sink_holds(tmp_path / "busy", read_changes(env.shared, None, spark=spark))


def test_the_pipeline_starts_its_session_before_it_plans_the_batch(
    env: Env, tmp_path: Path, in_process: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning runs while the session starts: the session is under way when the planner is called."""
    from icetail.monitor.planning.planner import Planner

    config = PipelineConfig(catalog=CATALOG, table=SHARED, state_url=f"sqlite:///{tmp_path}/state.db",
                            sink_url=f"parquet://{tmp_path}/sink", consumer="planned", start="earliest")  # fmt: skip
    pipeline = Pipeline(config)
    started_when_planning: list[bool] = []
    plan = Planner.plan

    def spy(self: Planner, *args: Any, **kwargs: Any) -> Any:
        started_when_planning.append(pipeline.started_own_session)
        return plan(self, *args, **kwargs)

    monkeypatch.setattr(Planner, "plan", spy)
    with pipeline:
        outcome = pipeline.run_batch()
    assert outcome is not None and outcome.completed
    assert started_when_planning == [True]


BAD_OTHER: list[Any] = [
    pytest.param(["status", "--state", "mysql://db/x"], ("mysql://db/x",), id="status-bad-state-url"),
    pytest.param(["status", "--consumer", "nobody"], ("nobody",), id="status-unknown-consumer"),
    pytest.param(
        ["reset", "--state", "mysql://db/x", "--consumer", "base", "--to", "latest"],
        ("mysql",),
        id="reset-bad-state-url",
    ),  # fmt: skip
    pytest.param(["reset", "--consumer", "nobody", "--to", "latest"], ("nobody",), id="reset-unknown-consumer"),
    pytest.param(["reset", "--consumer", "base", "--to", "yesterday"], ("--to 'yesterday'",), id="reset-bad-to"),
    pytest.param(["reset", "--consumer", "base"], ("--to", "--sink"), id="reset-without-to-or-sink"),
    pytest.param(
        ["reset", "--consumer", "base", "--sink", "parquet://s3://b/c"], ("s3://",), id="reset-to-a-remote-sink"
    ),
    pytest.param(["reset", "--consumer", "base", "--to", "full"], ("full",), id="reset-to-full"),
    pytest.param(["reset", "--consumer", "base", "--to", "snapshot:12345"], ("12345",), id="reset-unknown-snapshot"),
]


@pytest.mark.parametrize(("args", "fragments"), BAD_OTHER)
def test_status_and_reset_bad_input(env: Env, base_state: str, args: list[str], fragments: tuple[str, ...]) -> None:
    before = dump_state(base_state)
    if "--state" not in args:
        args = [args[0], "--state", base_state, *args[1:]]
    assert_one_line_error(run_icetail(args, env.child), 2, *fragments)
    assert dump_state(base_state) == before


def test_run_naming_an_existing_consumer_of_another_table_is_refused(env: Env, base_state: str, tmp_path: Path) -> None:
    """Consumer `base` follows ns.shared; a run of `base` on another table must not touch it."""
    small_table(env.catalog, "ns.other")
    before = dump_state(base_state)
    args = run_args(base_state, tmp_path / "sink", "base", "ns.other", "--on-missing-cursor", "latest")
    result = run_icetail(args, env.child)
    after = dump_state(base_state)
    if result.returncode == 0 or after != before:
        pytest.fail(
            "bug: an existing consumer's catalog/table are not checked against --catalog/--table "
            f"(exit {result.returncode}; cursor moved to the other table's snapshot: {after != before})"
        )
    assert_one_line_error(result, 2, "ns.shared", "ns.other")
