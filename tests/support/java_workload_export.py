"""Write Java workloads on Spark 3.5 and save the Java reader's rows per snapshot, for Spark 4 tests.

Run with the Spark 3.5 interpreter (`.venv/bin/python -m tests.support.java_workload_export OUT
CONFIG_JSON`): the Iceberg runtime jar only loads there. For each workload config it leaves,
under OUT/<label>/, the JDBC/SQLite catalog and warehouse, `oracle/<snapshot id>.parquet` (what
Java reads `VERSION AS OF` the snapshot, columns carrying their field ids) and `workload.json`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.support.javaref import build_spark_session, new_catalog
from tests.support.workloads import Workload


def export(out: Path, label: str, config: dict[str, object], spark: object) -> None:
    root = out / label
    catalog = new_catalog(spark, root / "iceberg", name=label)
    workload = Workload(catalog, "t", **config)  # type: ignore[arg-type]
    workload.run()
    oracle = root / "oracle"
    oracle.mkdir()
    ids = catalog.snapshot_ids("t")
    for snapshot_id in ids:
        pq.write_table(catalog.snapshot_rows("t", snapshot_id).table, oracle / f"{snapshot_id}.parquet")
    summary = {
        "name": catalog.name,
        "ident": catalog.ident("t"),
        "properties": catalog.properties(),
        "snapshot_ids": ids,
        "describe": workload.describe(),
    }
    (root / "workload.json").write_text(json.dumps(summary))


def main() -> None:
    out, configs = Path(sys.argv[1]), json.loads(sys.argv[2])
    spark = build_spark_session()
    for label, config in configs.items():
        export(out, label, config, spark)
    spark.stop()


if __name__ == "__main__":
    main()
