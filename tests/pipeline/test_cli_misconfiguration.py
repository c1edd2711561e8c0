"""No silent misconfiguration: the sink recorded per consumer, stores that are not icetail's, values
from the environment and the config file.

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    CATALOG,
    SHARED,
    Env,
    assert_one_line_error,
    dump_state,
    icetail_here,
    recorded_sink,
    run_args,
)
from tests.support.catalogs import catalogs_in_process
from tests.support.processes import run_icetail
from tests.support.sinks import read_parquet_sink
from tests.support.stores import PG_URL, drop_state, new_state_url, pg_unavailable

env = run_cli_support.env
in_process = run_cli_support.in_process
seeded_state = run_cli_support.seeded_state  # base_state copies it
base_state = run_cli_support.base_state


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
