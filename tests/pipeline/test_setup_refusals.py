"""A refused first run creates nothing, and says why in one line (issue 33, items 1, 3, 4 and 6).

Real `icetail run` and `reset` processes against the real PostgreSQL: a sink URL with a typo, a
three-part table name, a missing driver, a database or role that does not exist, an unreachable
server, a mirror without a key. Each must exit with one line (2 for what only a change of the
setup cures, 1 for what a retry may cure) and leave no SQLite file, no PostgreSQL schema or table
and no output behind. A missing psycopg is simulated with the import system's own seam: a child
that sets `sys.modules['psycopg'] = None` before icetail's entry point (what an environment
without the package gives: `import psycopg` raises, `find_spec` finds nothing).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import SHARED, Env, assert_one_line_error
from tests.support.processes import REPO_ROOT, run_icetail
from tests.support.stores import PG_URL, pg_unavailable

pytestmark = pytest.mark.once  # line-independent processes (tests/conftest.py: ONCE_ON_SPARK35)

env = run_cli_support.env  # one catalog holding the five-snapshot table ns.shared

HOST = PG_URL.removeprefix("postgresql://").split("@", 1)[1].split("/", 1)[0]  # 127.0.0.1:5432
CLOSED = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1
WITHOUT_PSYCOPG = (
    "import sys; sys.modules['psycopg'] = None; sys.argv[0] = 'icetail'; "
    "from icetail.monitor.cli.launch import entry; entry()"
)


@pytest.fixture
def schema(pg_schema: str) -> str:
    """A PostgreSQL schema name no one uses (dropped afterwards if it was created): the test asserts it
    is never created."""
    return pg_schema


def _sql(statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def _schema_exists(name: str) -> bool:
    return bool(_sql("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)))


def _run(
    env: Env, tmp_path: Path, sink: str, *extra: str, state: str | None = None
) -> subprocess.CompletedProcess[str]:
    state = state or f"sqlite:///{tmp_path / 'state.db'}"
    args = ["run", "--catalog", run_cli_support.CATALOG, "--table", SHARED, "--state", state, "--sink", sink, *extra]
    return run_icetail(args, env.child, cwd=tmp_path, timeout=120)


def _nothing_created(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refused run left files behind"


@pytest.mark.parametrize(
    ("query", "status", "fragments"),
    [
        ("?table={s}.x&tabel={s}.y", 2, ("unknown parameter 'tabel' (did you mean table?)", "known: table")),
        ("?table={s}.x&foo=bar", 2, ("unknown parameter 'foo'",)),
        ("?table={s}.b.c", 2, ("three parts", "table=SCHEMA.TABLE")),
        ("?table={s}.x", 2, ("no key to mirror by",)),  # refused after the store opened: removed again
    ],
)
def test_a_refused_mirror_url_creates_nothing(
    env: Env, tmp_path: Path, schema: str, query: str, status: int, fragments: tuple[str, ...]
) -> None:
    refused = _run(env, tmp_path, PG_URL + query.format(s=schema))
    assert_one_line_error(refused, status, *fragments)
    _nothing_created(tmp_path)
    assert not _schema_exists(schema), "the refused run created the schema"


@pytest.mark.parametrize(
    ("sink", "status", "fragments"),
    [
        (f"postgresql://postgres@{HOST}/icetail_no_such_db?table=s.t", 2, ('database "icetail_no_such_db"',)),
        (f"postgresql://icetail_no_such_role@{HOST}/test?table=s.t", 2, ('role "icetail_no_such_role"',)),
        (f"{CLOSED}?table=s.t", 1, ("cannot reach sink", "Connection refused")),
    ],
)
def test_a_sink_database_that_refuses_creates_no_store(
    env: Env, tmp_path: Path, schema: str, sink: str, status: int, fragments: tuple[str, ...]
) -> None:
    """A database or role that does not exist is terminal (exit 2), an unreachable server transient (1);
    neither leaves a checkpoint store behind (issue 33.3 and 33.6)."""
    refused = _run(env, tmp_path, sink, "--identifier-columns", "id")
    line = assert_one_line_error(refused, status, *fragments)
    if status == 2:
        assert "retrying cannot help" in line
    _nothing_created(tmp_path)
    # the same with a PostgreSQL store: its schema is not created either
    state = f"{PG_URL}?schema={schema}"
    assert_one_line_error(_run(env, tmp_path, sink, "--identifier-columns", "id", state=state), status, *fragments)
    assert not _schema_exists(schema)


def test_a_store_database_that_does_not_exist_is_terminal(env: Env, tmp_path: Path) -> None:
    if pg_unavailable():
        pytest.skip("no PostgreSQL")
    state = f"postgresql://postgres@{HOST}/icetail_no_such_db"
    refused = _run(env, tmp_path, f"parquet://{tmp_path / 'out'}", state=state)
    assert_one_line_error(refused, 2, 'database "icetail_no_such_db" does not exist', "retrying cannot help")
    _nothing_created(tmp_path)


def _without_psycopg(env: Env, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, *args],
        env=env.child,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_mirror_without_psycopg_names_the_extra_and_creates_nothing(env: Env, tmp_path: Path) -> None:
    """Issue 33.1: `unexpected error: ModuleNotFoundError`, exit 1, after the state file was created."""
    state = f"sqlite:///{tmp_path / 'state.db'}"
    args = ["run", "--catalog", run_cli_support.CATALOG, "--table", SHARED, "--state", state]
    refused = _without_psycopg(env, tmp_path, *args, "--sink", f"{PG_URL}?table=s.t", "--identifier-columns", "id")
    assert_one_line_error(refused, 2, "needs psycopg, which is not installed; pip install 'icetail[postgres]'")
    _nothing_created(tmp_path)
    store = _without_psycopg(env, tmp_path, *args[:-2], "--state", PG_URL, "--sink", f"parquet://{tmp_path}/out")
    assert_one_line_error(store, 2, "checkpoint store", "pip install 'icetail[postgres]'")
    _nothing_created(tmp_path)


def test_a_hive_catalog_without_its_extra_is_named_before_anything_is_created(env: Env, tmp_path: Path) -> None:
    hive_env = {**env.child, "PYICEBERG_CATALOG__HMS__TYPE": "hive", "PYICEBERG_CATALOG__HMS__URI": "thrift://h:1"}
    state = f"sqlite:///{tmp_path / 'state.db'}"
    args = ["run", "--catalog", "hms", "--table", SHARED, "--state", state, "--sink", f"jsonl://{tmp_path}/o.jsonl"]
    import importlib.util

    if importlib.util.find_spec("thrift") is not None:
        pytest.skip("the hive extra is installed here")
    refused = run_icetail(args, hive_env, cwd=tmp_path, timeout=120)
    assert_one_line_error(refused, 2, "catalog 'hms' (type hive) needs thrift", "pip install 'icetail[hive]'")
    _nothing_created(tmp_path)


def test_spark_connect_without_its_client_is_named_before_anything_is_created(env: Env, tmp_path: Path) -> None:
    from icetail.kernel.extras import CONNECT, missing_module

    if missing_module(CONNECT) is None:
        pytest.skip("the connect extra is installed here")
    remote_env = {**env.child, "SPARK_REMOTE": "sc://127.0.0.1:1"}
    state = f"sqlite:///{tmp_path / 'state.db'}"
    args = ["run", "--catalog", run_cli_support.CATALOG, "--table", SHARED, "--state", state]
    refused = run_icetail([*args, "--sink", f"jsonl://{tmp_path}/o.jsonl"], remote_env, cwd=tmp_path, timeout=120)
    assert_one_line_error(refused, 2, "SPARK_REMOTE=sc://127.0.0.1:1", "pip install 'icetail[connect]'")
    _nothing_created(tmp_path)


def test_reset_refuses_a_sink_url_with_a_typo(env: Env, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b"")  # never opened: the URL is refused first
    refused = run_icetail(
        ["reset", "--state", f"sqlite:///{state}", "--consumer", "c", "--sink", f"{PG_URL}?table=s.t&tabel=s.u"],
        env.child,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert_one_line_error(refused, 2, "did you mean table?")
    assert state.read_bytes() == b""
