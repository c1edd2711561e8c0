"""`serve`'s tables share Spark fairly: the jobs a table's cycle submits go to a FAIR pool of its own.

A Spark session with `spark.scheduler.mode=FAIR` (what `serve` starts for several tables) reads a
range inside `scheduler_pool("orders")`; Spark then holds a pool named `orders`, which it creates
only when a job is submitted to it. The jobs are submitted from icetail's worker threads, so this
fails if the pool does not travel to them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.catalogs import new_catalog
from tests.support.processes import REPO_ROOT, child_env

pytestmark = pytest.mark.once  # a JVM of its own; the pools are the same on both Spark lines

SCRIPT = """
import json, sys
import icetail
from icetail.reader.spark.session import scheduler_pool, spark_session

spark = spark_session(conf={"spark.scheduler.mode": "FAIR"})
table = icetail.load_table(sys.argv[1], "ns.t")
with scheduler_pool("orders"):
    rows = icetail.read_changes(table, spark=spark).num_rows
outside = icetail.read_changes(table, spark=spark).num_rows
jvm = spark.sparkContext._jsc.sc()
pools = {p: jvm.getPoolForName(p).isDefined() for p in ("orders", "other")}
print(json.dumps({"rows": [rows, outside], "pools": pools}))
spark.stop()
"""


def test_a_cycles_jobs_run_in_its_own_pool(tmp_path: Path) -> None:
    cat = new_catalog(tmp_path / "cat", "pools")
    cat.catalog().create_namespace("ns")
    table = cat.catalog().create_table("ns.t", schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": list(range(10))}))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "pools"],
        env=child_env([cat]),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"rows": [10, 10], "pools": {"orders": True, "other": False}}
