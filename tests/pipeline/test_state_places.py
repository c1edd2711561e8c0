"""Where `run` and `serve` keep their state and rows, said when they run; a SQLite store's folder is
never created (issue 25: `sqlite:///tmp/x.db` silently made `./tmp/x.db`)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.processes import child_env, icetail_lines, run_icetail

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture
def source(tmp_path: Path) -> LocalCatalog:
    cat = new_catalog(tmp_path / "cat", "places")
    cat.catalog().create_namespace("ns")
    cat.catalog().create_table("ns.t", schema=SCHEMA).append(pa.table({"id": [1, 2]}, SCHEMA))
    return cat


def _run(cat: LocalCatalog, cwd: Path, state: str, sink: str, *extra: str) -> tuple[int, list[str]]:
    args = ["run", "--catalog", "places", "--table", "ns.t", "--state", state, "--sink", sink, "--consumer", "c"]
    done = run_icetail([*args, *extra], child_env([cat], cwd / "spark"), cwd=cwd, timeout=300)
    return done.returncode, icetail_lines(done.stderr)


def test_three_slashes_to_a_missing_folder_is_refused_with_the_absolute_form(
    source: LocalCatalog, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    code, lines = _run(source, work, "sqlite:///tmp/x.db", f"parquet://{tmp_path}/sink", "--once")
    assert (code, len(lines)) == (2, 1), lines
    assert f"folder {work}/tmp does not exist" in lines[0], lines
    assert "for /tmp/x.db write four slashes: sqlite:////tmp/x.db" in lines[0], lines
    assert lines[0].endswith(f"mkdir -p {work}/tmp"), lines
    assert sorted(p.name for p in work.iterdir()) == ["spark"]  # no ./tmp, no store


def test_an_absolute_path_to_a_missing_folder_is_refused_not_created(source: LocalCatalog, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    code, lines = _run(source, tmp_path, f"sqlite:///{missing}/x.db", f"parquet://{tmp_path}/sink")
    assert (code, len(lines)) == (2, 1), lines
    assert f"folder {missing} does not exist" in lines[0] and "four slashes" not in lines[0], lines
    assert not (tmp_path / "no").exists()


def test_the_python_api_refuses_a_missing_folder_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        open_store(f"sqlite:///{tmp_path}/no/state.db")
    assert not (tmp_path / "no").exists()


def test_run_says_where_state_and_rows_went(source: LocalCatalog, tmp_path: Path) -> None:
    (tmp_path / "rel").mkdir()
    code, lines = _run(source, tmp_path, "sqlite:///rel/state.db", "parquet://out", "--once")
    assert code == 0, lines
    assert lines[0] == f"consumer c: state {tmp_path}/rel/state.db, sink parquet://{tmp_path}/out", lines
    assert (tmp_path / "rel" / "state.db").is_file() and (tmp_path / "out").is_dir()


def test_serve_logs_where_state_and_rows_go(source: LocalCatalog, tmp_path: Path) -> None:
    """The event comes first: here serve then stops on a metrics port already taken, before Spark."""
    (tmp_path / "rel").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--catalog", "places", "--table", "ns.t", "--state", "sqlite:///rel/state.db"]
        args += ["--sink", "parquet://out", "--consumer", "c", "--metrics-host", "127.0.0.1"]
        done = run_icetail([*args, "--metrics-port", str(port)], child_env([source]), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    events = [json.loads(line) for line in icetail_lines(done.stderr) if line.startswith("{")]
    places = [e for e in events if e["msg"] == "consumer places"]
    assert [(e["consumer"], e["state"], e["sink"]) for e in places] == [
        ("c", f"{tmp_path}/rel/state.db", f"parquet://{tmp_path}/out")
    ]
