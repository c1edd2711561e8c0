"""Write the row-lineage workloads with Java on Spark 3.5 and save Java's `_row_id` reads, for Spark 4.

Run with the Spark 3.5 interpreter (`.venv/bin/python -m tests.support.lineage_export OUT`): the
Iceberg runtime jar only loads there. It leaves under OUT/ a JDBC/SQLite catalog `lineage` with
table ns.t (v3, merge-on-read, tests/support/lineage_workload.STATEMENTS) and, in catalog
`nolineage`, the same first statements on a v2 table; `reads/<snapshot id>.parquet` (Java's
`SELECT _row_id, _last_updated_sequence_number, <data>` of each snapshot of ns.t) and
`workload.json` (catalog properties, (snapshot, parent) pairs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.support.javaref import build_spark_session, new_catalog
from tests.support.lineage_workload import STATEMENTS, create_table, java_lineage_read
from tests.support.workloads import MOR


def export(out: Path, spark: object) -> None:
    lineage = new_catalog(spark, out / "lineage", name="lineage")
    create_table(lineage, MOR)
    for statement in STATEMENTS:
        lineage.sql(statement)
    reads = out / "reads"
    reads.mkdir(parents=True)
    snapshots = [(s.snapshot_id, s.parent_snapshot_id) for s in lineage.snapshots("t")]
    for snapshot_id, _ in snapshots:
        pq.write_table(java_lineage_read(lineage, snapshot_id), reads / f"{snapshot_id}.parquet")
    nolineage = new_catalog(spark, out / "nolineage", name="nolineage")
    create_table(nolineage, MOR, format_version=2)
    for statement in STATEMENTS[:2]:
        nolineage.sql(statement)
    summary = {
        "lineage": lineage.properties(),
        "nolineage": nolineage.properties(),
        "snapshots": snapshots,
    }
    (out / "workload.json").write_text(json.dumps(summary))


def main() -> None:
    spark = build_spark_session()
    export(Path(sys.argv[1]), spark)
    spark.stop()


if __name__ == "__main__":
    main()
