"""`icetail run`, `status` and `reset` from the command line.

Bad input is checked in real child processes (no Spark is started on those paths): exit status
2, exactly one line on stderr, nothing on stdout, and the checkpoint store exactly as before.
Runs that deliver rows go through `icetail.monitor.cli.main.main` in this process, on the shared Spark
session, because a child would pay a JVM start per run; the lease tests run real concurrent
processes.

Every test table has five snapshots: S1 append ids 0-9, S2 append 10-19, S3 delete ids < 3
(copy-on-write), S4 append 20-24, S5 append 25-29.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.expressions import LessThan
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, catalogs_in_process, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.crash import kill_group
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, HOLD_SESSION_START_ENV, hold_env
from tests.support.processes import child_env, icetail_command, icetail_lines, run_icetail
from tests.support.sinks import CrashingSink, SimulatedCrash, read_parquet_sink
from tests.support.stores import PG_URL, drop_state, new_state_url, pg_unavailable
from tests.support.tables import BASE_SCHEMA, make_rows

CATALOG = "clisrc"
SHARED = "ns.shared"


# --------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------


def small_table(cat: LocalCatalog, ident: str) -> tuple[Table, list[int]]:
    """The five-snapshot table; returns it and its snapshot ids, oldest first."""
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists(ident.rsplit(".", 1)[0])
    table = catalog.create_table(ident, schema=BASE_SCHEMA)
    steps = [
        lambda t: t.append(make_rows(BASE_SCHEMA, range(10))),
        lambda t: t.append(make_rows(BASE_SCHEMA, range(10, 20))),
        lambda t: t.delete(LessThan("id", 3)),
        lambda t: t.append(make_rows(BASE_SCHEMA, range(20, 25))),
        lambda t: t.append(make_rows(BASE_SCHEMA, range(25, 30))),
    ]
    for step in steps:
        step(table)
        time.sleep(0.01)  # distinct commit milliseconds, for timestamp: starts
    table = catalog.load_table(ident)
    ids = [s.snapshot_id for s in table.metadata.snapshots]
    assert len(ids) == 5
    return table, ids


@dataclass(frozen=True)
class Env:
    catalog: LocalCatalog
    child: dict[str, str]  # environment of a child `icetail`
    shared: Table
    shared_ids: list[int]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    root = tmp_path_factory.mktemp("cli")
    cat = new_catalog(root / "catalog", CATALOG)
    table, ids = small_table(cat, SHARED)
    return Env(cat, child_env([cat], root / "spark"), table, ids)


@pytest.fixture
def in_process(env: Env, spark: Any) -> Iterator[None]:
    """`icetail` in this process (on the shared Spark session) resolves the test catalog."""
    with catalogs_in_process(env.catalog):
        yield


def icetail_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`icetail ARGS` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = cli_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_args(state: str, sink: Path | str, consumer: str, table: str = SHARED, *extra: str) -> list[str]:
    sink_url = sink if isinstance(sink, str) else f"parquet://{sink}"
    return ["run", "--catalog", CATALOG, "--table", table, "--state", state, "--sink", sink_url, "--consumer", consumer,
            *extra]  # fmt: skip


def dump_state(url: str) -> list[Any]:
    """Every consumer's checkpoint (without the read time) and history: compared before/after."""
    with open_store(url) as store:
        out = []
        for summary in store.list_consumers():
            checkpoint = store.load(summary.consumer)
            assert checkpoint is not None
            out.append((dataclasses.replace(checkpoint, as_of_ms=0), store.history(summary.consumer)))
        return out


def assert_one_line_error(result: subprocess.CompletedProcess[str], status: int, *fragments: str) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == status, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("icetail: error: "), lines[0]
    assert result.stdout == "", result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def move_sink(capsys: pytest.CaptureFixture[str], state: str, consumer: str, sink: Path) -> None:
    """`icetail reset --sink`: a consumer keeps one sink, so a test that reads each run's rows
    from its own folder moves the consumer there first, as an operator would."""
    code, _, err = icetail_here(
        capsys, "reset", "--state", state, "--consumer", consumer, "--sink", f"parquet://{sink}"
    )
    assert code == 0, err


def status_here(capsys: pytest.CaptureFixture[str], state: str, *args: str) -> Any:
    code, out, err = icetail_here(capsys, "status", "--state", state, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def sink_multiset(sink: Path, schema: pa.Schema) -> Any:
    return row_multiset(read_parquet_sink(sink), schema)


def assert_sink_holds(sink: Path, expected: pa.Table) -> None:
    want = row_multiset(expected, expected.schema)
    got = sink_multiset(sink, expected.schema)
    assert not diff_report(want, got), diff_report(want, got)


# --------------------------------------------------------------------------------------------
# Bad input: exit 2, one line, state unchanged
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded_state(env: Env, tmp_path_factory: pytest.TempPathFactory, spark: Any) -> str:
    """A store whose consumer `base` delivered S1-S2 of the shared table (S3-S5 still pending)."""
    root = tmp_path_factory.mktemp("seeded")
    url = f"sqlite:///{root}/state.db"
    with catalogs_in_process(env.catalog):
        assert cli_main(run_args(url, root / "sink", "base", SHARED, "--once", "--max-snapshots-per-batch", "2")) == 0
    with open_store(url) as store:
        checkpoint = store.load("base")
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == env.shared_ids[1]
    return url


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


def with_flags(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """`args` with each `--flag value` of `flags` replacing or adding that flag; lone switches appended."""
    out, i = list(args), 0
    while i < len(flags):
        flag = flags[i]
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            if flag in out:
                out[out.index(flag) + 1] = flags[i + 1]
            else:
                out += [flag, flags[i + 1]]
            i += 2
        else:
            out.append(flag)
            i += 1
    return out


@pytest.fixture
def base_state(seeded_state: str, tmp_path: Path) -> str:
    """A private copy of the seeded store (a test that changes it by mistake cannot spoil the next)."""
    target = tmp_path / "base-state.db"
    with sqlite3.connect(seeded_state.removeprefix("sqlite:///")) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return f"sqlite:///{target}"


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
        started_when_planning.append(pipeline._own_session is not None)
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


# --------------------------------------------------------------------------------------------
# No silent misconfiguration: the sink per consumer, stores that are not icetail's, config values
# --------------------------------------------------------------------------------------------


def recorded_sink(state: str, consumer: str) -> str | None:
    with open_store(state) as store:
        checkpoint = store.load(consumer)
    assert checkpoint is not None
    return checkpoint.sink


def test_run_with_another_sink_for_an_existing_consumer_is_refused(env: Env, base_state: str, tmp_path: Path) -> None:
    """Consumer `base` delivered S1-S2 to its sink; a run naming another sink would start the new
    one at S3 and leave the old one stopped at S2, both silently incomplete."""
    recorded = recorded_sink(base_state, "base")
    assert recorded is not None and recorded.startswith("parquet:///")
    before = dump_state(base_state)
    result = run_icetail(run_args(base_state, tmp_path / "other", "base"), env.child)
    assert_one_line_error(
        result, 2, f"delivers to {recorded}, not parquet://{tmp_path / 'other'}", "--consumer", "icetail reset"
    )
    assert dump_state(base_state) == before
    assert not (tmp_path / "other").exists() or read_parquet_sink(tmp_path / "other") is None


def test_the_same_sink_spelled_another_way_is_the_same_sink(
    env: Env, base_state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path, `..` segments and a trailing slash name the recorded folder: accepted."""
    recorded = recorded_sink(base_state, "base")
    assert recorded is not None
    folder = Path(recorded.removeprefix("parquet://"))
    monkeypatch.chdir(folder.parent)
    for spelling in (f"parquet://{folder.name}", f"parquet://{folder}/../{folder.name}/", f"PARQUET://{folder}"):
        config = PipelineConfig(CATALOG, SHARED, base_state, spelling, consumer="base")
        with catalogs_in_process(env.catalog), Pipeline(config) as pipeline:
            assert pipeline.sink_identity == recorded
    assert recorded_sink(base_state, "base") == recorded


def test_a_consumer_from_before_the_sink_was_recorded_records_it_on_its_next_run(
    env: Env, base_state: str, tmp_path: Path
) -> None:
    """Stores written before schema version 2 have no sink per consumer: the next run records its
    own (it cannot know the old one) instead of refusing, and from then on the rule holds."""
    path = base_state.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE icetail_consumers SET sink_url = NULL")
    conn.close()
    config = PipelineConfig(CATALOG, SHARED, base_state, f"parquet://{tmp_path}/sink", consumer="base")
    with catalogs_in_process(env.catalog), Pipeline(config):
        pass
    assert recorded_sink(base_state, "base") == f"parquet://{tmp_path}/sink"
    result = run_icetail(run_args(base_state, tmp_path / "elsewhere", "base"), env.child)
    assert_one_line_error(result, 2, f"delivers to parquet://{tmp_path}/sink")


def test_reset_sink_moves_a_consumer_and_says_so(
    env: Env, base_state: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = dump_state(base_state)
    code, out, err = icetail_here(
        capsys, "reset", "--state", base_state, "--consumer", "base", "--sink", f"parquet://{tmp_path}/moved"
    )
    assert (code, out) == (0, ""), err
    assert err == f"consumer base: delivers to parquet://{tmp_path}/moved from its cursor on\n"
    after = dump_state(base_state)
    assert [c.cursor for c, _ in after] == [c.cursor for c, _ in before]  # the cursor stays without --to
    assert recorded_sink(base_state, "base") == f"parquet://{tmp_path}/moved"
    config = PipelineConfig(CATALOG, SHARED, base_state, f"parquet://{tmp_path}/moved", consumer="base")
    with catalogs_in_process(env.catalog), Pipeline(config):
        pass  # the new sink is accepted


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--consumer", "base"], ["reset", "--consumer", "base", "--to", "earliest"]],
    ids=["status", "status-consumer", "reset"],
)
def test_status_and_reset_refuse_pyicebergs_catalog_database_and_leave_it_alone(
    env: Env, tmp_path: Path, args: list[str]
) -> None:
    """`--state sqlite:///catalog.db` (the catalog's database, a natural mix-up) must not get icetail's tables."""
    catalog_db = tmp_path / "catalog.db"
    with sqlite3.connect(env.catalog.root / "catalog.db") as src, sqlite3.connect(catalog_db) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    before = _digest(catalog_db)
    result = run_icetail([args[0], "--state", f"sqlite:///{catalog_db}", *args[1:]], env.child)
    assert_one_line_error(result, 2, f"sqlite:///{catalog_db} holds no icetail state", "check --state")
    assert _digest(catalog_db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.db"]


@pytest.mark.parametrize("command", ["status", "reset"])
def test_status_and_reset_refuse_a_postgres_schema_without_icetail_and_create_nothing(env: Env, command: str) -> None:
    why = pg_unavailable()
    if why:
        pytest.skip(why)
    import psycopg

    state = new_state_url("postgresql", Path("."))
    schema = state.split("?schema=")[1]
    args = [command, "--state", state] + (["--consumer", "base", "--to", "latest"] if command == "reset" else [])
    try:
        result = run_icetail(args, env.child)
        assert_one_line_error(result, 2, "holds no icetail state")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,))
            assert found.fetchall() == []
    finally:
        drop_state(state)


def test_reset_to_earliest_says_what_the_cursor_means(
    env: Env, base_state: str, in_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = icetail_here(capsys, "reset", "--state", base_state, "--consumer", "base", "--to", "earliest")
    assert (code, out) == (0, ""), err
    assert "None" not in err
    assert (
        err == "consumer base: cursor reset to before the first snapshot (the next run starts with the table's "
        "first snapshot)\n"
    )


def test_status_of_a_store_without_consumers_says_so(env: Env, tmp_path: Path) -> None:
    state = f"sqlite:///{tmp_path}/state.db"
    open_store(state).close()
    result = run_icetail(["status", "--state", state], env.child)
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert result.stderr == f"checkpoint store {state} has no consumers yet; `icetail run` creates one\n"
    as_json = run_icetail(["status", "--state", state, "--json"], env.child)
    assert json.loads(as_json.stdout) == []


BAD_ENVIRONMENT: list[Any] = [
    pytest.param(
        {"ICETAIL_PROTECT_CURSOR": "ture"},
        ("ICETAIL_PROTECT_CURSOR", "must be true or false", "'ture'"),
        id="bool",
    ),
    pytest.param({"ICETAIL_KEEP_CARRY_OVER": "maybe"}, ("ICETAIL_KEEP_CARRY_OVER", "true or false"), id="bool2"),
    pytest.param({"ICETAIL_CHUNK_ROWS": "1.5"}, ("ICETAIL_CHUNK_ROWS", "must be an integer"), id="int"),
    pytest.param({"ICETAIL_INTERVAL": "fast"}, ("ICETAIL_INTERVAL", "5s, 500ms"), id="duration"),
]


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize(("variables", "fragments"), BAD_ENVIRONMENT)
def test_run_and_serve_refuse_a_bad_value_in_the_environment(
    env: Env, base_state: str, tmp_path: Path, command: str, variables: dict[str, str], fragments: tuple[str, ...]
) -> None:
    """Both commands read the same sources the same way: a typo is refused, never read as false."""
    args = run_args(base_state, tmp_path / "sink", "base")
    args[0] = command
    if command == "serve":
        args += ["--metrics-host", "127.0.0.1", "--metrics-port", "0"]
    before = dump_state(base_state)
    assert_one_line_error(run_icetail(args, {**env.child, **variables}), 2, *fragments)
    assert dump_state(base_state) == before


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("protect_cursor: ture\n", ("icetail.yaml: protect_cursor must be true or false",)),
        ("chunk_rows: 1.5\n", ("icetail.yaml: chunk_rows must be an integer",)),
        ("chunk_rows: true\n", ("chunk_rows must be an integer",)),
        ("consumer: 42\n", ("consumer must be a string",)),
        ("tables: [{table: ns.a}, {table: ns.b}]\n", ("follows one table", "icetail serve")),
    ],
    ids=["bool", "float-for-int", "bool-for-int", "int-for-string", "two-tables"],
)
def test_run_config_file_values_are_checked(
    env: Env, base_state: str, tmp_path: Path, content: str, fragments: tuple[str, ...]
) -> None:
    config = tmp_path / "icetail.yaml"
    config.write_text(f"catalog: {CATALOG}\ntable: {SHARED}\nstate: {base_state}\nsink: '-'\n" + content)
    before = dump_state(base_state)
    result = run_icetail(["run", "--config", str(config)], env.child)
    assert_one_line_error(result, 2, *fragments)
    assert dump_state(base_state) == before


def test_run_reads_its_configuration_from_a_file_and_the_environment(env: Env, base_state: str, tmp_path: Path) -> None:
    """`icetail run --config` with the sink from ICETAIL_SINK: the refusal quotes the layered values."""
    config = tmp_path / "icetail.yaml"
    config.write_text(f"catalog: {CATALOG}\ntable: {SHARED}\nstate: {base_state}\nconsumer: base\n")
    result = run_icetail(["run", "--config", str(config)], {**env.child, "ICETAIL_SINK": f"parquet://{tmp_path}/e"})
    assert_one_line_error(result, 2, f"not parquet://{tmp_path}/e")  # the layered sink reached the pipeline
    missing = run_icetail(["run", "--catalog", CATALOG], env.child)
    assert_one_line_error(missing, 2, "missing --table, --state, --sink", "--config", "ICETAIL_")


# --------------------------------------------------------------------------------------------
# Missing cursor: expired snapshot, rollback
# --------------------------------------------------------------------------------------------


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


def _full_snapshot_rows(got: pa.Table | None, table: Table) -> None:
    """`got` is the current snapshot's live rows as INSERTs of that snapshot with ordinal 0."""
    current = table.current_snapshot()
    assert got is not None and current is not None
    data = [f.name for f in BASE_SCHEMA]
    assert row_multiset(got.select(data), BASE_SCHEMA) == row_multiset(table.scan().to_arrow(), BASE_SCHEMA)
    assert set(got.column("_change_type").to_pylist()) == {"INSERT"}
    assert set(got.column("_commit_snapshot_id").to_pylist()) == {current.snapshot_id}
    assert set(got.column("_change_ordinal").to_pylist()) == {0}


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
    _full_snapshot_rows(read_parquet_sink(tmp_path / "sink1"), table)


# --------------------------------------------------------------------------------------------
# Leases: one run per consumer
# --------------------------------------------------------------------------------------------


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_second_run_of_a_consumer_refuses_while_the_first_holds_the_lease(env: Env, tmp_path: Path) -> None:
    """The first run holds after its first chunk until the hold file is removed (a test seam), so
    the second run, reset and status certainly meet it in progress, however fast the machine."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "pair", SHARED, "--chunk-rows", "3")
    log = tmp_path / "first.log"
    hold = tmp_path / "hold"  # while it exists, the first run waits after a committed chunk
    hold.touch()
    with open(log, "w") as out:
        first = subprocess.Popen(
            [*icetail_command(), *args],
            env={**env.child, **hold_env(HOLD_AFTER_CHUNK_ENV, hold)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_file(Path(f"{hold}.held"), first, timeout=120)  # the first run is mid-batch, holding its lease
        owner = _lease_owner(state, "pair")
        assert f":{first.pid}:" in owner, owner
        second = run_icetail(args, env.child)
        reset = run_icetail(["reset", "--state", state, "--consumer", "pair", "--to", "earliest"], env.child)
        status = run_icetail(["status", "--state", state, "--json"], env.child)
        assert first.poll() is None, "the held run must still be running"
    finally:
        hold.unlink(missing_ok=True)
        first.wait(timeout=300)
    assert first.returncode == 0, log.read_text()
    # refused: transient (exit 1, retry later), one line naming the holder
    assert_one_line_error(second, 1, "leased to", owner)
    assert_one_line_error(reset, 1, "leased to")
    assert json.loads(status.stdout)[0]["lease_owner"] == owner
    assert_sink_holds(sink, read_changes(env.shared))


def test_sigterm_mid_batch_ends_in_one_line_and_releases_the_lease(env: Env, tmp_path: Path) -> None:
    """A supervisor's SIGTERM (to the driver only, as systemd or Kubernetes send it) mid-batch: the
    run says so in one line, exits 143 and releases its lease, so the next run starts at once and
    finishes the batch exactly. It used to die silently with its lease held (chaos harness,
    issue 26)."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "term", SHARED, "--chunk-rows", "3")
    hold = tmp_path / "hold"
    hold.touch()
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env={**env.child, **hold_env(HOLD_AFTER_CHUNK_ENV, hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_file(Path(f"{hold}.held"), run, timeout=120)  # mid-batch, lease held
        assert f":{run.pid}:" in _lease_owner(state, "term")
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        hold.unlink(missing_ok=True)
        kill_group(run)
    lines = icetail_lines(err)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert lines == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err
    with open_store(state, create=False) as store:
        checkpoint = store.load("term")
    assert checkpoint is not None and checkpoint.lease is None, checkpoint
    assert checkpoint.inflight is not None, "the SIGTERM must have landed mid-batch"
    again = run_icetail(args, env.child)
    assert again.returncode == 0, again.stderr
    assert_sink_holds(sink, read_changes(env.shared))


def test_sigterm_during_start_up_ends_in_one_line(env: Env, tmp_path: Path) -> None:
    """SIGTERM while the command is still importing pyspark (its first seconds): one line, exit 143,
    never a silent death (the handler is installed before the commands are imported)."""
    args = run_args(f"sqlite:///{tmp_path}/state.db", tmp_path / "sink", "early")
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env=env.child,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(1.0)
    run.send_signal(signal.SIGTERM)
    try:
        _, err = run.communicate(timeout=60)
    finally:
        kill_group(run)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert icetail_lines(err) == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err


def test_sigterm_while_the_jvm_starts_ends_in_one_line_without_waiting_for_it(env: Env, tmp_path: Path) -> None:
    """SIGTERM with a batch planned and the Spark JVM still starting: the run gives the start up
    instead of waiting for it (under load a JVM start outlasted the harness's 20 s grace period,
    without a line: issue 26 finding 11), says so in one line, and the next run delivers exactly.
    The start is held by a test seam, so it provably never finishes before the stop."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "starting", SHARED)
    hold = tmp_path / "hold-start"
    hold.touch()
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env={**env.child, **hold_env(HOLD_SESSION_START_ENV, hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_file(Path(f"{hold}.held"), run, timeout=120)  # the JVM is asked for only after the hold
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)  # waiting for the held start would never end
    finally:
        kill_group(run)
    assert hold.exists(), "the start was held for the whole run"
    assert run.returncode == 128 + signal.SIGTERM, err
    assert icetail_lines(err) == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err
    with open_store(state, create=False) as store:
        checkpoint = store.load("starting")
    assert checkpoint is None or checkpoint.lease is None, checkpoint
    again = run_icetail(args, env.child)
    assert again.returncode == 0, again.stderr
    assert_sink_holds(sink, read_changes(env.shared))


def _wait_for_file(path: Path, proc: subprocess.Popen[Any], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended before creating {path}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _lease_owner(state: str, consumer: str) -> str:
    with open_store(state, create=False) as store:
        checkpoint = store.load(consumer)
    assert checkpoint is not None and checkpoint.lease is not None and checkpoint.lease_is_live()
    return checkpoint.lease.owner


def _wait_for_lease(state: str, consumer: str, proc: subprocess.Popen[Any], *, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    store = None
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the first run ended before taking its lease"
            if store is None and Path(state.removeprefix("sqlite:///")).exists():
                try:  # never create: the child may not have made its tables yet; poll again then
                    store = open_store(state, create=False)
                except ConfigError:
                    pass
            checkpoint = store.load(consumer) if store is not None else None
            if checkpoint is not None and checkpoint.lease_is_live() and checkpoint.lease is not None:
                return checkpoint.lease.owner
            time.sleep(0.05)
    finally:
        if store is not None:
            store.close()
    raise AssertionError("the first run never took its lease")


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_a_killed_runs_lease_is_taken_over_at_once_on_the_same_host(env: Env, tmp_path: Path) -> None:
    """The holder `host:pid:token` is gone (SIGKILL): the next run takes over instead of waiting 120 s."""
    state = f"sqlite:///{tmp_path}/state.db"
    args = run_args(state, tmp_path / "sink", "killed")
    with open(tmp_path / "first.log", "w") as out:
        first = subprocess.Popen(
            [*icetail_command(), *args], env=env.child, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        owner = _wait_for_lease(state, "killed", first, timeout=60)
    finally:
        kill_group(first)
    with open_store(state) as store:
        checkpoint = store.load("killed")
    assert checkpoint is not None and checkpoint.lease is not None and checkpoint.lease.owner == owner
    assert checkpoint.lease_is_live()  # left behind by the killed run
    second = run_icetail(args, env.child)
    assert second.returncode == 0, second.stderr
    with open_store(state) as store:
        after = store.load("killed")
    assert after is not None and after.inflight is None and not after.lease_is_live()


def test_status_of_a_store_that_does_not_exist(env: Env, tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "state.db"
    result = run_icetail(["status", "--state", f"sqlite:///{missing}"], env.child)
    if result.returncode == 0:
        assert missing.exists()
        pytest.fail("bug: `status` on a missing SQLite store creates it (and its directories) and exits 0")
    assert_one_line_error(result, 2, str(missing))
    assert not missing.exists()


def test_run_and_reset_refuse_a_consumer_leased_by_another_host(env: Env, base_state: str, tmp_path: Path) -> None:
    with open_store(base_state) as store:
        store.acquire_lease("base", "otherhost:4242:feedbeef", 60)
    before = dump_state(base_state)
    result = run_icetail(run_args(base_state, tmp_path / "sink", "base"), env.child)
    assert_one_line_error(result, 1, "otherhost:4242:feedbeef")
    reset = run_icetail(["reset", "--state", base_state, "--consumer", "base", "--to", "earliest"], env.child)
    assert_one_line_error(reset, 1, "otherhost:4242:feedbeef")
    assert dump_state(base_state) == before
    assert read_parquet_sink(tmp_path / "sink") is None


# --------------------------------------------------------------------------------------------
# status and reset
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# --start semantics
# --------------------------------------------------------------------------------------------


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
    _full_snapshot_rows(got, table)
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


def test_reset_takes_over_the_lease_of_a_run_killed_on_this_host(
    env: Env, base_state: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chaos harness (issue 26, `reset-sink`): after a SIGKILL, `reset` was refused for the rest of the
    TTL ("leased to host:pid:token ... stop that run") although that run was gone; `run` already
    took such a lease over. A holder that still runs on this host is still refused."""
    from icetail.kernel.processes import host_name

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid of this host that no longer runs
    with open_store(base_state) as store:
        store.acquire_lease("base", f"{host_name()}:{gone.pid}:deadbeef", 120)
    code, out, err = icetail_here(
        capsys, "reset", "--state", base_state, "--consumer", "base", "--sink", f"parquet://{tmp_path}/moved"
    )
    assert (code, out) == (0, ""), err
    assert recorded_sink(base_state, "base") == f"parquet://{tmp_path}/moved"

    alive = subprocess.Popen(["sleep", "60"])
    try:
        with open_store(base_state) as store:
            store.acquire_lease("base", f"{host_name()}:{alive.pid}:cafef00d", 120)
        before = dump_state(base_state)
        code, _, err = icetail_here(
            capsys, "reset", "--state", base_state, "--consumer", "base", "--sink", f"parquet://{tmp_path}/again"
        )
        assert code == 1 and f"{alive.pid}:cafef00d" in err and err.count("\n") == 1, err
        assert dump_state(base_state) == before
    finally:
        alive.kill()
        alive.wait()
