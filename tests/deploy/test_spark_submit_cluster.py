"""deploy/spark-submit.sh against a real Spark standalone cluster on 127.0.0.1.

A master and one worker (1 core, 1g) are started from pip's pyspark (`spark-class`), the job
`run --until-caught-up` is submitted with `SPARK_MASTER=spark://127.0.0.1:<port>`, and its
parquet sink must hold exactly `icetail.monitor.engine.api.read_changes` of the table. The splits run as
tasks on the worker's executor (checked in the executor's log). Every process group is killed
at teardown, also when the test fails.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from pyiceberg.expressions import EqualTo, LessThan

from icetail.monitor.engine.api import read_changes
from icetail.reader.spark.waves import TASKS_PER_CORE
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    NAMESPACE,
    Child,
    Warehouse,
    assert_same_rows,
    counts_by_type,
    free_port,
    http_get,
    sink_rows,
    wait_until,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
# spark-submit.sh passes --name icetail; reader.spark.spark_session() sets appName("icetail") as well,
# which would override a different SPARK_APP_NAME
APP_NAME = "icetail"
TABLE = f"{NAMESPACE}.orders"
CLUSTER_SECONDS = 90.0
SUBMIT_SECONDS = 240.0

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])


def orders(ids: range, factor: float = 1.0) -> pa.Table:
    return pa.table({"id": list(ids), "amount": [i * factor for i in ids]}, schema=SCHEMA)


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "iceberg")


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in reversed(started):
        child.kill_group()


class Cluster:
    """A standalone master and one worker, each in its own process group."""

    def __init__(self, tmp_path: Path, children: list[Child]) -> None:
        self.port, self.ui_port, worker_ui = free_port(), free_port(), free_port()
        self.work_dir = tmp_path / "spark-work"
        self.env = child_env(extra={"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local")})
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self.master = Child(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
            env=self.env,
            cwd=tmp_path,
            name="spark-master",
        )
        children.append(self.master)
        self.worker = Child(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(worker_ui),
                "--work-dir",
                str(self.work_dir),
            ],
            env=self.env,
            cwd=tmp_path,
            name="spark-worker",
        )
        children.append(self.worker)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def state(self) -> dict[str, Any] | None:
        """The master's JSON status page (workers, applications), None until it answers."""
        reply = http_get(f"http://127.0.0.1:{self.ui_port}/json/")
        return json.loads(reply[1]) if reply is not None and reply[0] == 200 else None

    def wait_for_worker(self) -> None:
        def alive_worker() -> bool:
            assert self.worker.alive(), self.worker.diagnostics()
            state = self.state()
            return state is not None and state.get("aliveworkers") == 1 and state.get("status") == "ALIVE"

        wait_until(alive_worker, timeout=CLUSTER_SECONDS, interval=0.25, what="a registered worker", child=self.master)


@pytest.mark.skipif(not (SPARK_HOME / "bin" / "spark-class").exists(), reason="pyspark ships no bin/spark-class")
def test_spark_submit_runs_the_job_on_a_standalone_cluster(
    tmp_path: Path, warehouse: Warehouse, children: list[Child], spark: Any
) -> None:
    cluster = Cluster(tmp_path, children)  # JVMs start while the table is written

    table = warehouse.create_table("orders", SCHEMA, {"write.target-file-size-bytes": "20000"})
    table.append(orders(range(3000)))  # several data files: several tasks on the executor
    table.delete(LessThan("id", 100))
    table.overwrite(orders(range(500, 501), factor=2.0), overwrite_filter=EqualTo("id", 500))
    table.append(orders(range(3000, 3010)))
    table = warehouse.load("orders")
    data_files = len(table.inspect.files())
    assert data_files >= 3

    cluster.wait_for_worker()
    sink = tmp_path / "sink"
    submit_tmp = tmp_path / "submit-tmp"
    submit_tmp.mkdir()
    env = child_env(
        extra={
            **warehouse.env(),
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_MASTER": cluster.url,
            "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
            "PYTHON": sys.executable,
            "TMPDIR": str(submit_tmp),
        }
    )
    job = Child(
        [
            "bash",
            str(DEPLOY / "spark-submit.sh"),
            "--catalog",
            CATALOG_NAME,
            "--table",
            TABLE,
            "--state",
            f"sqlite:///{tmp_path / 'state.db'}",
            "--sink",
            f"parquet://{sink}",
        ],
        env=env,
        cwd=tmp_path,
        name="spark-submit",
    )
    children.append(job)
    assert job.wait(SUBMIT_SECONDS) == 0, job.diagnostics()

    # exactly the change stream of the whole history
    expected = read_changes(table, spark=spark)
    got = sink_rows(sink)
    assert counts_by_type(got) == counts_by_type(expected)
    assert_same_rows(got, expected)
    assert set(counts_by_type(expected)) == {"INSERT", "DELETE"}

    # `icetail run` reported one batch over the whole history (Spark's PythonRunner sends the
    # Python driver's stderr to spark-submit's stdout)
    output = job.stdout_path.read_text() + job.stderr()
    current = table.metadata.current_snapshot_id
    assert re.search(rf"batch b000001-\S+: snapshots \(None, {current}\]", output), job.diagnostics()
    assert not list(submit_tmp.iterdir()), "spark-submit.sh removes its temporary zip"

    # it ran as an application of the cluster, and the splits ran on the worker's executor
    state = cluster.state()
    assert state is not None
    apps = [a for a in state["completedapps"] + state["activeapps"] if a["name"] == APP_NAME]
    assert len(apps) == 1 and apps[0]["state"] == "FINISHED", apps
    executor = cluster.work_dir / apps[0]["id"] / "0"
    assert (executor / "icetail.zip").exists(), sorted(p.name for p in executor.iterdir())
    finished = re.findall(r"Finished task \S+ in stage", (executor / "stderr").read_text(errors="replace"))
    # splits run as a few tasks per core (reader.spark.group_for_tasks), spread over the executor
    assert len(finished) >= min(data_files, TASKS_PER_CORE), (executor / "stderr").read_text(errors="replace")[-3000:]
