"""The CLI through a real Spark Connect server: `SPARK_REMOTE=sc://...` and nothing else changes.

Spark Connect has no SparkContext and no RDDs; icetail's read runs there as a DataFrame job
(`mapInArrow` over one row per task). The server is pip's pyspark 4 started on 127.0.0.1; the
rows it delivers must equal, row for row, what the classic local session reads in this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from icetail.monitor.engine.api import read_changes
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, row_multiset
from tests.support.connect_server import ConnectServer, connect_server
from tests.support.processes import child_env, run_icetail
from tests.support.sinks import read_parquet_sink
from tests.support.tables import build_mixed_table

pytestmark = pytest.mark.spark4


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect")) as server:
        yield server


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalCatalog, Any]:
    cat = new_catalog(tmp_path_factory.mktemp("remotecat"), "remotecat")
    return cat, build_mixed_table(cat, "ns.mixed")


def _run_remotely(args: list[str], cat: LocalCatalog, tmp_path: Path, remote: ConnectServer) -> None:
    """Runs the CLI with SPARK_REMOTE and checks that the server ran its tasks."""
    before = remote.tasks_finished()
    done = run_icetail(args, {**child_env([cat], tmp_path / "spark"), "SPARK_REMOTE": remote.url})
    assert done.returncode == 0, done.stderr
    assert remote.tasks_finished() > before, "the read did not run on the Spark Connect server"


def test_changes_through_spark_connect_equal_the_local_read(
    spark: Any, remote: ConnectServer, mixed: tuple[LocalCatalog, Any], tmp_path: Path
) -> None:
    cat, table = mixed
    out = tmp_path / "changes.parquet"
    args = ["changes", "--catalog", cat.name, "--table", "ns.mixed", "--output", str(out)]
    _run_remotely(args, cat, tmp_path, remote)
    expected = read_changes(table)
    got = pq.read_table(out)
    assert got.schema.names == expected.schema.names
    want, have = row_multiset(expected, expected.schema), row_multiset(got, expected.schema)
    assert not diff_report(want, have), diff_report(want, have)


def test_run_through_spark_connect_delivers_every_change_once(
    spark: Any, remote: ConnectServer, mixed: tuple[LocalCatalog, Any], tmp_path: Path
) -> None:
    cat, table = mixed
    sink = tmp_path / "sink"
    args = ["run", "--catalog", cat.name, "--table", "ns.mixed", "--state", f"sqlite:///{tmp_path}/state.db",
            "--sink", f"parquet://{sink}", "--chunk-rows", "100", "--max-snapshots-per-batch", "4"]  # fmt: skip
    _run_remotely(args, cat, tmp_path, remote)
    expected = read_changes(table)
    want, have = row_multiset(expected, expected.schema), row_multiset(read_parquet_sink(sink), expected.schema)
    assert not diff_report(want, have), diff_report(want, have)
