"""`icetail serve` configuration: config file < ICETAIL_* environment < flags, `tables:` lists,
one-line ConfigErrors, and the exit status of `icetail serve --config bad.yaml`.

The arguments come from the real `icetail` parser; the environment is passed explicitly.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import DEFAULT_LEASE_TTL_SECONDS
from icetail.monitor.cli.main import build_parser
from icetail.monitor.service.config import ServiceConfig, build_service_config, parse_duration, run_config
from tests.support.processes import child_env
from tests.support.serve import ICETAIL, free_port

BASE = {
    "catalog": "prod",
    "table": "db.events",
    "state": "sqlite:////var/lib/icetail/state.db",
    "sink": "parquet:///data/changes",
}


def config_file(tmp_path: Path, content: dict[str, Any] | str) -> str:
    path = tmp_path / "icetail.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(path)


def build(tmp_path: Path, content: dict[str, Any] | str | None, *flags: str, **env: str) -> ServiceConfig:
    argv = ["serve", *flags]
    if content is not None:
        argv += ["--config", config_file(tmp_path, content)]
    return build_service_config(build_parser().parse_args(argv), environ=env)


def config_error(tmp_path: Path, content: dict[str, Any] | str | None, *flags: str, **env: str) -> str:
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, content, *flags, **env)
    message = str(caught.value)
    assert "\n" not in message and message.strip() == message, repr(message)
    return message


# --------------------------------------------------------------------------------------------
# precedence
# --------------------------------------------------------------------------------------------


def test_defaults_from_a_minimal_file(tmp_path: Path) -> None:
    config = build(tmp_path, BASE)
    assert (config.interval_seconds, config.metrics_host, config.metrics_port) == (5.0, "0.0.0.0", 9464)
    assert (config.max_failures, config.shutdown_timeout_seconds, config.log_level) == (5, 30.0, "INFO")
    (pipeline,) = config.pipelines
    assert (pipeline.catalog, pipeline.table, pipeline.state_url, pipeline.sink_url) == tuple(BASE.values())
    assert pipeline.consumer_id == "prod.db.events" and pipeline.start == "earliest"
    assert pipeline.carry_over_removal is True and pipeline.protect_cursor is False


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    content = {
        **BASE,
        "interval": "10s",
        "metrics-port": 1000,  # dashes or underscores
        "max_failures": 7,
        "shutdown_timeout": "1m",
        "chunk_rows": 100,
        "start": "latest",
        "protect_cursor": False,
    }
    env = {
        "ICETAIL_INTERVAL": "500ms",
        "ICETAIL_METRICS_PORT": "2000",
        "ICETAIL_SINK": "jsonl:///env/changes.jsonl",
        "ICETAIL_CHUNK_ROWS": "200",
        "ICETAIL_PROTECT_CURSOR": "true",
        "ICETAIL_LOG_LEVEL": "debug",
        "ICETAIL_CONSUMER": "",  # empty variables are ignored
    }
    config = build(tmp_path, content, "--metrics-port", "3000", "--catalog", "flagcat", "--chunk-rows", "300", **env)

    assert config.interval_seconds == 0.5  # env over file
    assert config.metrics_port == 3000  # flag over env over file
    assert config.max_failures == 7 and config.shutdown_timeout_seconds == 60.0  # file only
    assert config.log_level == "DEBUG"  # normalized
    (pipeline,) = config.pipelines
    assert pipeline.catalog == "flagcat"  # flag over file
    assert pipeline.sink_url == "jsonl:///env/changes.jsonl"  # env over file
    assert pipeline.chunk_rows == 300  # flag over env over file
    assert pipeline.protect_cursor is True  # env "true" over file false
    assert pipeline.state_url == BASE["state"] and pipeline.start == "latest"
    assert pipeline.consumer_id == "flagcat.db.events"

    without_flags = build(tmp_path, content, **env)
    assert without_flags.metrics_port == 2000 and without_flags.pipelines[0].chunk_rows == 200
    without_env = build(tmp_path, content)
    assert without_env.metrics_port == 1000 and without_env.pipelines[0].chunk_rows == 100
    assert without_env.interval_seconds == 10.0 and without_env.pipelines[0].sink_url == BASE["sink"]


def test_environment_and_flags_alone_need_no_file(tmp_path: Path) -> None:
    env = {f"ICETAIL_{k.upper()}": v for k, v in BASE.items()}
    config = build(
        tmp_path, None, "--interval", "2m", "--keep-carry-over", **env, ICETAIL_IDENTIFIER_COLUMNS="id, region"
    )
    assert config.interval_seconds == 120.0
    (pipeline,) = config.pipelines
    assert pipeline.table == "db.events" and pipeline.carry_over_removal is False
    assert pipeline.identifier_columns == ("id", "region")


def test_two_tables_inherit_top_level_keys_and_override_them(tmp_path: Path) -> None:
    content = {
        "catalog": "prod",
        "state": "postgresql://icetail@db:5432/icetail?schema=icetail",
        "interval": "2s",
        "chunk-rows": 500,
        "tables": [
            {"table": "db.a", "sink": "parquet:///out/a"},
            {
                "table": "db.b",
                "consumer": "b-tail",
                "sink": "iceberg://prod/db.b_changes",
                "chunk_rows": 10,
                "keep-carry-over": True,
                "identifier_columns": ["id", "region"],
                "start": "snapshot:42",
                "max_snapshots_per_batch": "3",
                "on_missing_cursor": "latest",
            },
        ],
    }
    config = build(tmp_path, content, ICETAIL_CATALOG="envcat")
    assert config.interval_seconds == 2.0
    a, b = config.pipelines
    assert (a.catalog, a.table, a.sink_url, a.chunk_rows, a.consumer_id) == (
        "envcat",
        "db.a",
        "parquet:///out/a",
        500,
        "envcat.db.a",
    )
    assert a.carry_over_removal is True and a.identifier_columns is None and a.start == "earliest"
    assert (b.catalog, b.table, b.consumer_id, b.sink_url) == (
        "envcat",
        "db.b",
        "b-tail",
        "iceberg://prod/db.b_changes",
    )
    assert (b.chunk_rows, b.carry_over_removal, b.identifier_columns) == (10, False, ("id", "region"))
    assert (b.start, b.max_snapshots_per_batch, b.on_missing_cursor) == ("snapshot:42", 3, "latest")
    assert a.state_url == b.state_url == content["state"]
    # each table's sink URL travels parsed, as the configuration was built
    assert (a.sink_target.scheme, a.sink_target.path) == ("parquet", "/out/a")
    assert (b.sink_target.catalog, b.sink_target.identifier, b.sink_target.mode) == ("prod", "db.b_changes", None)


def test_two_tables_with_the_same_consumer_are_refused(tmp_path: Path) -> None:
    content = {**BASE, "tables": [{"consumer": "same"}, {"table": "db.other", "consumer": "same"}]}
    assert "share a consumer id" in config_error(tmp_path, content)
    # same table twice without consumers: both default to CATALOG.NS.TABLE
    assert "share a consumer id" in config_error(tmp_path, {**BASE, "tables": [{}, {}]})


# --------------------------------------------------------------------------------------------
# errors: one line, naming the problem
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({**BASE, "bogus": 1}, "unknown key 'bogus'"),
        (
            {**BASE, "tables": [{"table": "db.a"}, {"table": "db.b", "colour": "red"}]},
            "tables[1]: unknown key 'colour'",
        ),
        ({**BASE, "interval": "5 minutes"}, "duration '5 minutes'"),
        ({**BASE, "shutdown_timeout": "soon"}, "duration 'soon'"),
        ({**BASE, "interval": "-1s"}, "duration '-1s'"),
        ({**BASE, "chunk_rows": "many"}, "chunk_rows must be an integer"),
        ({**BASE, "chunk_rows": 0}, "--chunk-rows must be >= 1"),
        ({**BASE, "start": "yesterday"}, "yesterday"),
        ({**BASE, "table": "events"}, "NAMESPACE.TABLE"),
        ({**BASE, "tables": {"table": "db.a"}}, "'tables' must be a list"),
        ({**BASE, "tables": ["db.a"]}, "tables[0] must be a mapping"),
        ({k: v for k, v in BASE.items() if k != "sink"}, "missing --sink"),
        ("interval: [1\n", "is not valid YAML"),
        ("- just\n- a list\n", "must hold a mapping"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_bad_configuration_is_one_line_config_error(tmp_path: Path, content: Any, expected: str) -> None:
    assert expected in config_error(tmp_path, content)


def test_unknown_key_names_the_allowed_ones(tmp_path: Path) -> None:
    message = config_error(tmp_path, {**BASE, "metrics-prot": 9000})
    assert "unknown key 'metrics-prot'" in message and "metrics_port" in message and "tables" in message


def test_bad_environment_values_are_config_errors(tmp_path: Path) -> None:
    assert "duration 'fast'" in config_error(tmp_path, BASE, ICETAIL_INTERVAL="fast")
    assert "chunk_rows must be an integer" in config_error(tmp_path, BASE, ICETAIL_CHUNK_ROWS="1e3")


def test_missing_config_file(tmp_path: Path) -> None:
    message = config_error(tmp_path, None, "--config", str(tmp_path / "absent.yaml"))
    assert message == f"--config {tmp_path / 'absent.yaml'} does not exist"


@pytest.mark.parametrize(
    "content",
    [{**BASE, "metrics_port": "ninety"}, {**BASE, "max_failures": "x"}],
    ids=["metrics_port", "max_failures"],
)
def test_non_integer_service_values_are_config_errors(tmp_path: Path, content: dict[str, Any]) -> None:
    assert "must be an integer" in config_error(tmp_path, content)


def test_unknown_log_level_is_a_config_error(tmp_path: Path) -> None:
    assert "LOUD" in config_error(tmp_path, {**BASE, "log_level": "LOUD"})


def test_max_failures_must_be_positive(tmp_path: Path) -> None:
    config_error(tmp_path, {**BASE, "max_failures": 0})


def test_parse_duration_units() -> None:
    assert [parse_duration(t) for t in ("5s", "500ms", "2m", "1h", "1.5s", "7", 3, 0.25)] == [
        5.0,
        0.5,
        120.0,
        3600.0,
        1.5,
        7.0,
        3.0,
        0.25,
    ]


# --------------------------------------------------------------------------------------------
# the process: `icetail serve --config bad.yaml`
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("catalog: prod\ntable: db.t\nstate: sqlite:////s.db\nsink: '-'\ncolour: red\n", "unknown key 'colour'"),
        ("catalog: prod\ntable: db.t\nstate: sqlite:////s.db\nsink: '-'\ninterval: 1 hour\n", "duration '1 hour'"),
        ("tables: [\n", "is not valid YAML"),
        # checked before the metrics server, Spark or a first cycle start, as `run` checks them
        ("catalog: prod\ntable: db.t\nstate: 'sqlite://host/s.db'\nsink: '-'\n", "bad checkpoint store URL"),
        ("catalog: prod\ntable: db.t\nstate: 'mysql://h/db'\nsink: '-'\n", "bad checkpoint store URL"),
        ("catalog: prod\ntable: db.t\nstate: sqlite:////s.db\nsink: 'parquet:/x'\n", "sink URL 'parquet:/x'"),
        ("catalog: prod\ntable: db.t\nstate: sqlite:////s.db\nsink: 'kafka://t'\n", "unknown scheme 'kafka'"),
        (b"catalog: prod\n\xff\xfe\x00binary", "is not UTF-8 text"),
    ],
    ids=["unknown-key", "bad-duration", "invalid-yaml", "state-host", "state-scheme", "sink-form", "sink-scheme",
         "binary"],  # fmt: skip
)
def test_serve_with_a_bad_config_exits_2_with_one_line(tmp_path: Path, content: str | bytes, expected: str) -> None:
    if isinstance(content, bytes):
        path = str(tmp_path / "icetail.yaml")
        Path(path).write_bytes(content)
    else:
        path = config_file(tmp_path, content)
    port = free_port()
    done = subprocess.run(
        [ICETAIL, "serve", "--config", path, "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
        env=child_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("icetail: error: ") and expected in lines[0]
    assert done.stdout == ""
    assert not (tmp_path / "s.db").exists() and not list(tmp_path.glob("spark-*"))  # nothing was started


def test_run_with_a_binary_config_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "icetail.yaml"
    path.write_bytes(bytes(range(256)))
    message = config_error(tmp_path, None, "--config", str(path))
    assert f"--config {path} is not" in message


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "catalog 'nowhere' is not configured"),
        # hive: its extra (thrift) is not in the dev environment; glue's boto3 is (moto brings it)
        ({"PYICEBERG_CATALOG__NOWHERE__TYPE": "hive", "PYICEBERG_CATALOG__NOWHERE__URI": "thrift://127.0.0.1:9"},
         "pip install 'icetail[hive]'"),
        # boto3 is installed but no AWS region is configured: a setup error, not an outage
        ({"PYICEBERG_CATALOG__NOWHERE__TYPE": "glue", "AWS_CONFIG_FILE": "/nonexistent"}, "no AWS region"),
    ],
    ids=["unconfigured-catalog", "missing-catalog-extra", "glue-without-region"],
)
def test_serve_setup_errors_exit_2_at_once_without_retries(tmp_path: Path, env: dict[str, str], expected: str) -> None:
    """A setup error cannot heal by retrying: one failed cycle, then exit 2 with the one-line fix."""
    done = subprocess.run(
        [ICETAIL, "serve", "--catalog", "nowhere", "--table", "db.t", "--state", f"sqlite:///{tmp_path / 's.db'}",
         "--sink", f"parquet://{tmp_path / 'sink'}", "--metrics-host", "127.0.0.1", "--metrics-port", "0",
         "--interval", "1s", "--max-failures", "5"],
        env={k: v for k, v in child_env(extra=env).items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("icetail: error: ") and expected in last, done.stderr
    assert "--uri" not in last  # pyiceberg's advice names a flag of its own CLI, not ours
    assert done.stderr.count('"msg": "cycle failed"') == 1, done.stderr  # not retried


def test_serve_on_a_port_in_use_exits_2_naming_it(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [ICETAIL, "serve", "--catalog", "c", "--table", "db.t", "--state", f"sqlite:///{tmp_path / 's.db'}",
             "--sink", f"parquet://{tmp_path / 'sink'}", "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
            env=child_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"icetail: error: cannot serve metrics on 127.0.0.1:{port}") and "--metrics-port" in last
    assert "unexpected error" not in done.stderr


# --------------------------------------------------------------------------------------------
# typed values: nothing guessed, the source named; `run` reads the same sources as `serve`
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["true", "True", "yes", "on", "1", "false", "no", "OFF", "0"])
def test_booleans_accept_the_usual_words(tmp_path: Path, word: str) -> None:
    (pipeline,) = build(tmp_path, BASE, ICETAIL_PROTECT_CURSOR=word).pipelines
    assert pipeline.protect_cursor is (word.lower() in ("true", "yes", "on", "1"))


def test_a_bad_boolean_is_refused_naming_its_source_and_the_accepted_values(tmp_path: Path) -> None:
    message = config_error(tmp_path, BASE, ICETAIL_PROTECT_CURSOR="ture")
    assert message == (
        "ICETAIL_PROTECT_CURSOR: protect_cursor must be true or false (also accepted: yes/on/1, no/off/0), got 'ture'"
    )
    from_file = config_error(tmp_path, {**BASE, "keep-carry-over": "nope"})
    assert from_file.startswith(f"{tmp_path / 'icetail.yaml'}: keep_carry_over must be true or false")
    in_table = config_error(tmp_path, {**BASE, "tables": [{"protect_cursor": "sure"}]})
    assert "tables[0]: protect_cursor must be true or false" in in_table


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({**BASE, "chunk_rows": 1.5}, "chunk_rows must be an integer, got 1.5"),
        ({**BASE, "chunk_rows": True}, "chunk_rows must be an integer, got True"),
        ({**BASE, "metrics_port": "80.0"}, "metrics_port must be an integer"),
        ({**BASE, "interval": True}, "interval duration True"),
        ({**BASE, "consumer": 42}, "consumer must be a string, got 42; quote it"),
        ({**BASE, "identifier_columns": [1, 2]}, "identifier_columns must be column names"),
        ({**BASE, "identifier_columns": " , "}, "identifier_columns needs at least one column name"),
        ({**BASE, "tables": [{"interval": "1s"}]}, "tables[0]: key 'interval' applies to the whole service"),
    ],
    ids=["float-int", "bool-int", "float-string-port", "bool-duration", "int-string", "list-ints", "empty-list",
         "service-key-in-table"],
)  # fmt: skip
def test_values_of_the_wrong_type_are_refused(tmp_path: Path, content: dict[str, Any], expected: str) -> None:
    assert expected in config_error(tmp_path, content)


def test_bad_flags_are_named_as_flags(tmp_path: Path) -> None:
    assert config_error(tmp_path, BASE, "--interval", "soon").startswith("--interval: interval duration 'soon'")


def test_run_reads_the_same_sources_the_same_way_as_serve(tmp_path: Path) -> None:
    content = {**BASE, "chunk_rows": 100, "protect_cursor": "yes", "interval": "2s"}
    env = {"ICETAIL_SINK": "jsonl:///env/changes.jsonl", "ICETAIL_CHUNK_ROWS": "200"}
    path = config_file(tmp_path, content)
    serve = build_service_config(build_parser().parse_args(["serve", "--config", path, "--consumer", "c"]), env)
    run = run_config(build_parser().parse_args(["run", "--config", path, "--consumer", "c"]), env)
    assert serve.pipelines == (run,)
    assert (run.sink_url, run.chunk_rows, run.protect_cursor, run.consumer_id) == (
        "jsonl:///env/changes.jsonl",
        200,
        True,
        "c",
    )
    # a service value is checked for run too: one configuration, one reading of it
    with pytest.raises(ConfigError, match="ICETAIL_INTERVAL"):
        run_config(build_parser().parse_args(["run", "--config", path]), {"ICETAIL_INTERVAL": "soon"})


def test_net_from_file_environment_and_flag(tmp_path: Path) -> None:
    assert build(tmp_path, BASE).pipelines[0].net is False
    assert build(tmp_path, {**BASE, "net": True}).pipelines[0].net is True
    assert build(tmp_path, {**BASE, "net": True}, ICETAIL_NET="false").pipelines[0].net is False
    assert build(tmp_path, BASE, "--net").pipelines[0].net is True
    message = config_error(tmp_path, {**BASE, "net": True, "keep_carry_over": True})
    assert "--net always cancels carry-over rows; drop --keep-carry-over" in message


def test_with_schema_id_from_file_environment_and_flag(tmp_path: Path) -> None:
    """`--with-schema-id` (add `_schema_id`) is read like every other switch: file < ICETAIL_* < flag."""
    assert build(tmp_path, BASE).pipelines[0].with_schema_id is False
    assert build(tmp_path, {**BASE, "with-schema-id": True}).pipelines[0].with_schema_id is True
    assert build(tmp_path, BASE, ICETAIL_WITH_SCHEMA_ID="yes").pipelines[0].with_schema_id is True
    assert build(tmp_path, {**BASE, "with_schema_id": False}, "--with-schema-id").pipelines[0].with_schema_id is True
    assert "ICETAIL_WITH_SCHEMA_ID: with_schema_id must be true or false" in config_error(
        tmp_path, BASE, ICETAIL_WITH_SCHEMA_ID="maybe"
    )


def test_with_row_lineage_from_file_environment_and_flag(tmp_path: Path) -> None:
    def lineage(content: dict[str, Any], *flags: str, **env: str) -> bool:
        return build(tmp_path, content, *flags, **env).pipelines[0].with_row_lineage

    assert lineage(BASE) is False
    assert lineage({**BASE, "with-row-lineage": True}) is True
    assert lineage({**BASE, "with_row_lineage": True}, ICETAIL_WITH_ROW_LINEAGE="false") is False  # env over file
    assert lineage(BASE, "--with-row-lineage", ICETAIL_WITH_ROW_LINEAGE="no") is True  # flag over env
    assert "ICETAIL_WITH_ROW_LINEAGE" in config_error(tmp_path, BASE, ICETAIL_WITH_ROW_LINEAGE="ture")
    run = run_config(build_parser().parse_args(["run", "--with-row-lineage", *_flags(BASE)]), environ={})
    assert run.with_row_lineage is True


def _flags(values: dict[str, str]) -> list[str]:
    return [part for key, value in values.items() for part in (f"--{key}", value)]


def test_sink_commit_bounds_from_file_environment_and_flags(tmp_path: Path) -> None:
    content = {**BASE, "sink_commit_rows": 5000, "sink_commit_interval": "1m"}
    default = build(tmp_path, BASE).pipelines[0]
    assert (default.sink_commit_rows, default.sink_commit_interval_seconds) == (1_000_000, 10.0)
    from_file = build(tmp_path, content).pipelines[0]
    assert (from_file.sink_commit_rows, from_file.sink_commit_interval_seconds) == (5000, 60.0)
    env = {"ICETAIL_SINK_COMMIT_ROWS": "7000", "ICETAIL_SINK_COMMIT_INTERVAL": "500ms"}
    from_env = build(tmp_path, content, **env).pipelines[0]
    assert (from_env.sink_commit_rows, from_env.sink_commit_interval_seconds) == (7000, 0.5)
    flags = ("--sink-commit-rows", "0", "--sink-commit-interval", "2s")
    from_flags = build(tmp_path, content, *flags, **env).pipelines[0]
    assert (from_flags.sink_commit_rows, from_flags.sink_commit_interval_seconds) == (0, 2.0)
    assert not from_flags.group_policy.groups


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        pytest.param(("--sink-commit-rows", "-1"), {}, "--sink-commit-rows must be >= 0", id="negative-rows"),
        pytest.param(("--sink-commit-interval", "soon"), {}, "--sink-commit-interval duration 'soon'", id="bad-flag"),
        pytest.param((), {"ICETAIL_SINK_COMMIT_INTERVAL": "x"}, "ICETAIL_SINK_COMMIT_INTERVAL", id="bad-env"),
        pytest.param((), {"ICETAIL_SINK_COMMIT_ROWS": "1e6"}, "sink_commit_rows must be an integer", id="env-not-int"),
    ],
)
def test_bad_sink_commit_bounds_are_one_line_errors(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    assert expected in config_error(tmp_path, BASE, *flags, **env)


def test_manifest_cache_entries_from_file_environment_and_flag(tmp_path: Path) -> None:
    assert build(tmp_path, BASE).pipelines[0].manifest_cache_entries == 250_000
    assert build(tmp_path, {**BASE, "manifest_cache_entries": 10}).pipelines[0].manifest_cache_entries == 10
    from_env = build(tmp_path, BASE, ICETAIL_MANIFEST_CACHE_ENTRIES="20")
    assert from_env.pipelines[0].manifest_cache_entries == 20
    flag = build(tmp_path, BASE, "--manifest-cache-entries", "0", ICETAIL_MANIFEST_CACHE_ENTRIES="20")
    assert flag.pipelines[0].manifest_cache_entries == 0
    assert "--manifest-cache-entries must be >= 0" in config_error(tmp_path, BASE, "--manifest-cache-entries", "-1")


def test_lease_ttl_from_file_environment_and_flags_on_run_and_serve(tmp_path: Path) -> None:
    """The lease TTL is a duration like the others; short by default, so a dead replica's consumers move soon."""
    assert build(tmp_path, BASE).pipelines[0].lease_ttl_seconds == DEFAULT_LEASE_TTL_SECONDS <= 30.0
    content = {**BASE, "lease_ttl": "1m"}
    assert build(tmp_path, content).pipelines[0].lease_ttl_seconds == 60.0
    assert build(tmp_path, content, ICETAIL_LEASE_TTL="45s").pipelines[0].lease_ttl_seconds == 45.0
    from_flag = build(tmp_path, content, "--lease-ttl", "10s", ICETAIL_LEASE_TTL="45s")
    assert from_flag.pipelines[0].lease_ttl_seconds == 10.0
    run = run_config(build_parser().parse_args(["run", "--lease-ttl", "2m", *_flags(BASE)]), environ={})
    assert run.lease_ttl_seconds == 120.0
    assert "--lease-ttl duration 'soon'" in config_error(tmp_path, BASE, "--lease-ttl", "soon")
    assert "ICETAIL_LEASE_TTL" in config_error(tmp_path, BASE, ICETAIL_LEASE_TTL="x")
    assert "--lease-ttl must be at least 3s" in config_error(tmp_path, {**BASE, "lease_ttl": "500ms"})


def test_the_engine_is_set_per_table_by_file_environment_and_flag(tmp_path: Path) -> None:
    """`engine` and `local_max_bytes` are pipeline keys: top level, per table, ICETAIL_*, flags."""
    content = {
        **BASE,
        "engine": "auto",
        "local_max_bytes": 1024,
        "tables": [
            {"table": "db.small", "consumer": "small"},
            {"table": "db.big", "consumer": "big", "engine": "spark"},
        ],
    }
    small, big = build(tmp_path, content).pipelines
    assert (small.engine, small.local_max_bytes, big.engine, big.local_max_bytes) == ("auto", 1024, "spark", 1024)
    (one,) = build(tmp_path, BASE, "--engine", "local", "--local-max-bytes", "7").pipelines
    assert (one.engine, one.local_max_bytes) == ("local", 7)
    (env,) = build(tmp_path, BASE, ICETAIL_ENGINE="spark", ICETAIL_LOCAL_MAX_BYTES="0").pipelines
    assert (env.engine, env.local_max_bytes) == ("spark", 0)
    (default,) = build(tmp_path, BASE).pipelines
    assert (default.engine, default.local_max_bytes) == ("auto", None)


def test_spark_idle_stop_is_a_duration_with_a_five_minute_default(tmp_path: Path) -> None:
    assert build(tmp_path, BASE).spark_idle_stop_seconds == 300.0
    assert build(tmp_path, {**BASE, "spark_idle_stop": "90s"}).spark_idle_stop_seconds == 90.0
    assert build(tmp_path, BASE, "--spark-idle-stop", "2m").spark_idle_stop_seconds == 120.0
    assert "spark_idle_stop must be positive" in config_error(tmp_path, {**BASE, "spark_idle_stop": "0s"})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param({**BASE, "engine": "fast"}, "engine must be one of auto, spark, local", id="engine"),
        pytest.param({**BASE, "local_max_bytes": -1}, "--local-max-bytes must be >= 0", id="negative-bytes"),
        pytest.param({**BASE, "local_max_bytes": "64MB"}, "local_max_bytes must be an integer", id="bytes-text"),
    ],
)
def test_bad_engine_settings_are_one_line_config_errors(tmp_path: Path, content: dict[str, Any], expected: str) -> None:
    assert expected in config_error(tmp_path, content)


def test_batch_bounds_are_pipeline_keys(tmp_path: Path) -> None:
    tables = [{"table": "db.a"}, {"table": "db.b", "max_bytes_per_batch": 5}]
    a, b = build(tmp_path, {**BASE, "max_rows_per_batch": 1000, "tables": tables}).pipelines
    assert (a.max_rows_per_batch, a.max_bytes_per_batch) == (1000, None)
    assert (b.max_rows_per_batch, b.max_bytes_per_batch) == (1000, 5)
    (flagged,) = build(tmp_path, BASE, "--max-rows-per-batch", "7", ICETAIL_MAX_BYTES_PER_BATCH="9").pipelines
    assert (flagged.max_rows_per_batch, flagged.max_bytes_per_batch) == (7, 9)
    assert "--max-rows-per-batch must be >= 1" in config_error(tmp_path, {**BASE, "max_rows_per_batch": 0})
