"""`icetail run` / `status` with a PostgreSQL mirror sink, as a user runs them: the target follows the
table, and a password given in the URL never appears in any output or in the recorded sink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import In

from tests.pipeline.test_pg_mirror import ARROW, SCHEMA
from tests.support.catalogs import new_catalog
from tests.support.pg_mirror import row_set, target_table
from tests.support.processes import child_env, run_icetail
from tests.support.stores import PG_URL

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

PASSWORD = "hunter2-never-printed"


def test_run_and_status_mirror_without_showing_the_password(tmp_path: Path, pg_schema: str) -> None:
    cat = new_catalog(tmp_path / "src", "mirrorcli")
    cat.catalog().create_namespace("ns")
    table = cat.catalog().create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=ARROW))
    cat.load("ns.t").delete(In("id", [2]))
    # trust authentication ignores the password: it is there to be hidden
    sink = PG_URL.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@") + f"?table={pg_schema}.t"
    env = child_env([cat], tmp_path / "spark")
    state = f"sqlite:///{tmp_path / 'state.db'}"
    run = run_icetail(["run", "--catalog", cat.name, "--table", "ns.t", "--state", state, "--sink", sink], env)
    status = run_icetail(["status", "--state", state], env)
    outputs: list[Any] = [run.stdout, run.stderr, status.stdout, status.stderr]
    assert run.returncode == 0, run.stderr[-3000:]
    assert status.returncode == 0 and f"{pg_schema}.t" in status.stdout + status.stderr
    assert not [o for o in outputs if PASSWORD in o]
    assert row_set(target_table(pg_schema), ("id", "v")) == [(1, "a"), (3, "c")]
    (tmp_path / "state.db").unlink()
    bad = run_icetail(
        [
            "run",
            "--catalog",
            cat.name,
            "--table",
            "ns.t",
            "--state",
            state,
            "--sink",
            sink.replace("?table=", "?tabel="),
        ],
        env,
    )
    # a misspelt parameter is named, with the one meant (issue 33 s4), in one line without the password
    assert bad.returncode == 2 and "unknown parameter 'tabel' (did you mean table?)" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and PASSWORD not in bad.stderr + bad.stdout
