"""What a repair by a direct diff costs on a large table with a small difference.

    .venv/bin/python -m bench.direct_diff [--rows 2000000] [--files 200] [--workdir /tmp/icetail-direct-diff]

Java writes `--rows` rows in `--files` files (merge-on-read, v2); a `--protect-cursor` consumer
delivers them; then a DELETE of 100 rows (one file gets position deletes), an UPDATE of one
row and an INSERT of 100 rows, and `expire_snapshots(retain_last => 1)`. The consumer's next run
is the repair batch. Printed: the repair's planning (manifests read, seconds), the data files and
bytes it read against the whole table's, and the same consumer's alternative,
`--on-missing-cursor full` (every live file read again). bench/RESULTS.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.planning.planner import Planner
from tests.support.expiry import expire
from tests.support.javaref import build_spark_session, new_catalog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/icetail-direct-diff"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    spark = build_spark_session()
    catalog = new_catalog(spark, args.workdir / "iceberg", "diffbench")
    os.environ.update(catalog.env())
    ident = catalog.ident("t")
    fq = catalog.fq(ident)
    props = "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    columns = "id bigint, k int, name string, amount double"
    catalog.sql(f"CREATE TABLE {fq} ({columns}) USING iceberg TBLPROPERTIES ({props})")
    catalog.sql(
        f"INSERT INTO {fq} SELECT /*+ REPARTITION_BY_RANGE({args.files}, id) */ id, CAST(id % 1000 AS INT), "
        f"concat('name-', CAST(id AS STRING)), id / 4.0 FROM range(0, {args.rows})"
    )
    config = PipelineConfig(
        catalog.name, ident, f"sqlite:///{args.workdir}/state.db", f"parquet://{args.workdir}/sink",
        consumer="bench", protect_cursor=True,
    )  # fmt: skip
    with Pipeline(config, spark=spark) as pipeline:
        first = pipeline.run()
    catalog.sql(f"DELETE FROM {fq} WHERE id < 100")
    catalog.sql(f"UPDATE {fq} SET amount = -1 WHERE id = 500")
    new_rows = f"range({args.rows}, {args.rows + 100})"
    catalog.sql(f"INSERT INTO {fq} SELECT /*+ COALESCE(1) */ id, 0, 'new', 0.0 FROM {new_rows}")
    expire(catalog, ident, "procedure-retain-last")
    table = catalog.load_table(ident)
    cursor = table.metadata.refs["icetail-bench"].snapshot_id
    started = time.perf_counter()
    plan = Planner(table).plan_direct(cursor, table.metadata.current_snapshot_id)  # a fresh manifest cache
    planning = time.perf_counter() - started
    full = Planner(table).plan_full()
    with Pipeline(config, spark=spark) as pipeline:
        repair = pipeline.run()
    assert len(repair) == 1 and repair[0].collapsed
    result = {
        "rows": args.rows,
        "files": args.files,
        "first_batch": {"data_files": first[0].data_files, "bytes_read": first[0].bytes_read,
                        "seconds": round(first[0].batch_seconds, 2)},
        "repair_plan": {"manifests_read": plan.manifests_read, "tasks": len(plan.tasks),
                        "seconds": round(planning, 3)},
        "repair_batch": {"data_files": repair[0].data_files, "delete_files": repair[0].delete_files,
                         "bytes_read": repair[0].bytes_read, "rows_decoded": repair[0].rows_decoded,
                         "rows": repair[0].rows_by_change_type, "seconds": round(repair[0].batch_seconds, 2)},
        "full_alternative": {"data_files": len(full.tasks),
                             "bytes": sum(t.data_file.file_size_in_bytes for t in full.tasks)},
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
