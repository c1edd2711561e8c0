"""Fixtures and helpers of the `icetail run`, `status` and `reset` tests (tests/pipeline/test_cli_*.py).

Every test table has five snapshots: S1 append ids 0-9, S2 append 10-19, S3 delete ids < 3
(copy-on-write), S4 append 20-24, S5 append 25-29. A test module takes the fixtures by name
(`env = run_cli_support.env`): each module gets its own table and seeded store.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import LessThan
from pyiceberg.table import Table

from icetail.monitor.cli.main import main as cli_main
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, catalogs_in_process, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.processes import child_env
from tests.support.sinks import read_parquet_sink
from tests.support.tables import BASE_SCHEMA, make_rows

CATALOG = "clisrc"
SHARED = "ns.shared"


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


def recorded_sink(state: str, consumer: str) -> str | None:
    with open_store(state) as store:
        checkpoint = store.load(consumer)
    assert checkpoint is not None
    return checkpoint.sink


def assert_full_snapshot_rows(got: pa.Table | None, table: Table) -> None:
    """`got` is the current snapshot's live rows as INSERTs of that snapshot with ordinal 0."""
    current = table.current_snapshot()
    assert got is not None and current is not None
    data = [f.name for f in BASE_SCHEMA]
    assert row_multiset(got.select(data), BASE_SCHEMA) == row_multiset(table.scan().to_arrow(), BASE_SCHEMA)
    assert set(got.column("_change_type").to_pylist()) == {"INSERT"}
    assert set(got.column("_commit_snapshot_id").to_pylist()) == {current.snapshot_id}
    assert set(got.column("_change_ordinal").to_pylist()) == {0}
