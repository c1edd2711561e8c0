"""The data source (batch and stream) against Java Iceberg on Java-written workloads, on Spark 4.

The Iceberg runtime jar loads on Spark 3.5 only, so a subprocess on the 3.5 venv (`.venv`)
writes the workloads and saves what the Java reader returns at every snapshot
(tests/support/java_workload_export.py); here the oracle checker compares the data source's
output with those rows, snapshot by snapshot, as tests/differential does for read_changes.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.spark4.support import comparable
from tests.spark4.test_stream_source import run_available_now, sink_rows
from tests.support.javaref import SnapshotRows
from tests.support.oracle import check_changes, field_id_of
from tests.support.workloads import COW, MIXED, MOR

ROOT = Path(__file__).resolve().parents[2]
PYTHON35 = ROOT / ".venv" / "bin" / "python"
WORKLOADS = {
    "wlmor": {"seed": 11, "steps": 8, "format_version": 2, "partitioned": False, "mode": MOR},
    "wlcow": {"seed": 12, "steps": 8, "format_version": 2, "partitioned": True, "mode": COW},
    "wldv": {"seed": 13, "steps": 8, "format_version": 3, "partitioned": True, "mode": MIXED},
}


@dataclass
class OracleCatalog:
    """The checker's view of a Java catalog, with the Java reads loaded from the saved oracle rows."""

    root: Path
    name: str
    pyiceberg: Any
    properties: dict[str, str]
    snapshot_ids: list[int]
    describe: str
    _cache: dict[int, SnapshotRows] = field(default_factory=dict)

    def ident(self, table: str) -> str:
        return table if "." in table else f"ns.{table}"

    def fq(self, ident: str) -> str:
        return f"{self.name}.{self.ident(ident)}"

    def load_table(self, ident: str) -> Any:
        return self.pyiceberg.load_table(self.ident(ident))

    def snapshot_rows(self, ident: str, snapshot_id: int) -> SnapshotRows:
        if snapshot_id not in self._cache:
            table = self.load_table(ident)
            snapshot = table.snapshot_by_id(snapshot_id)
            schema = table.schemas()[snapshot.schema_id]
            rows = pq.read_table(self.root / "oracle" / f"{snapshot_id}.parquet")
            field_ids = {field_id_of(f): f.name for f in rows.schema}
            self._cache[snapshot_id] = SnapshotRows(snapshot_id, snapshot.schema_id, rows, field_ids, schema)
        return self._cache[snapshot_id]

    def options(self, **extra: Any) -> dict[str, str]:
        opts = {"catalog": self.name, "table": "ns.t", **{f"catalog.{k}": v for k, v in self.properties.items()}}
        opts.update({k.replace("_", "-"): str(v) for k, v in extra.items()})
        return opts


@pytest.fixture(scope="session")
def java_workloads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, OracleCatalog]:
    if not PYTHON35.exists():
        pytest.skip("the Spark 3.5 venv (.venv, `make .venv/.icetail-installed`) writes the Java workloads")
    out = tmp_path_factory.mktemp("java-workloads")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
        env.pop(key, None)  # the 3.5 process starts its own Spark with its own interpreter
    result = subprocess.run(
        [str(PYTHON35), "-m", "tests.support.java_workload_export", str(out), json.dumps(WORKLOADS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    catalogs = {}
    for label in WORKLOADS:
        summary = json.loads((out / label / "workload.json").read_text())
        props = summary["properties"]
        catalogs[label] = OracleCatalog(
            out / label, label, SqlCatalog(label, **props), props, summary["snapshot_ids"], summary["describe"]
        )
    return catalogs


def _spark_changes(spark: Any, options: dict[str, str]) -> pa.Table:
    return comparable(spark.read.format("icetail").options(**options).load().toArrow())


@pytest.mark.parametrize("label", list(WORKLOADS))
def test_batch_ranges_match_java(registered: Any, java_workloads: dict[str, OracleCatalog], label: str) -> None:
    catalog = java_workloads[label]
    ids = catalog.snapshot_ids
    ranges = [(None, None), (ids[0], ids[len(ids) // 2]), (ids[len(ids) // 2], None), (ids[-2], ids[-1])]
    problems: list[str] = []
    for from_id, to_id in ranges:
        extra = {}
        if from_id is not None:
            extra["from_snapshot"] = from_id
        if to_id is not None:
            extra["to_snapshot"] = to_id
        got = _spark_changes(registered, catalog.options(**extra))
        problems += check_changes(got, catalog, "t", from_id, to_id)
    assert not problems, "\n".join(problems) + "\n" + catalog.describe


@pytest.mark.parametrize("label", list(WORKLOADS))
def test_stream_matches_java(
    registered: Any, java_workloads: dict[str, OracleCatalog], label: str, tmp_path: Path
) -> None:
    catalog = java_workloads[label]
    run_available_now(registered, catalog.options(starting="earliest", max_snapshots_per_trigger=3), tmp_path)
    got = comparable(sink_rows(registered, tmp_path))
    problems = check_changes(got, catalog, "t", None, None)
    assert not problems, "\n".join(problems) + "\n" + catalog.describe
