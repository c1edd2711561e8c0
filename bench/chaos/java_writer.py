"""The Java Iceberg writer of the merge-on-read kinds: one long-lived pyspark 3.5 JVM with the Iceberg
runtime (tests/support/javaref), shared by the trials of a harness run, driven over JSON lines.

pyiceberg cannot write delete files, so position deletes (v2), deletion vectors (v3), equality
deletes and write-audit-publish branches are written by Java, in this process, while `icetail run`
follows the table. It is also the harness's reference reader for those kinds (pyiceberg 0.12 reads
neither deletion vectors nor equality deletes): `rows` writes what Java reads at a snapshot.

Requests (one JSON object a line on stdin; one answer a line on stdout, `{"ok": ...}` or `{"error": "..."}`):
`open` {name, root} registers a JDBC/SQLite catalog at `root` (created by Java first: JdbcCatalog V1
layout, which pyiceberg's SQL catalog shares); `sql` {name, statements} runs Spark SQL with `{cat}`
replaced by the catalog; `eqdelete` {name, table, ids} commits one equality-delete file on `id`;
`rows` {name, table, snapshot, out} writes the Java read of that snapshot to a parquet file.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def serve(stdin: Any, stdout: Any) -> None:
    import pyarrow.parquet as pq

    from tests.support.javaref import JavaCatalog, build_spark_session, new_catalog, spark_df_to_arrow

    spark = build_spark_session()
    catalogs: dict[str, JavaCatalog] = {}
    print(json.dumps({"ok": "ready"}), file=stdout, flush=True)
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            op = request["op"]
            if op == "open":
                catalogs[request["name"]] = new_catalog(spark, Path(request["root"]), name=request["name"])
                answer: Any = True
            elif op == "sql":
                cat = catalogs[request["name"]]
                for stmt in request["statements"]:
                    cat.sql(stmt).collect()
                answer = True
            elif op == "eqdelete":
                cat = catalogs[request["name"]]
                ids = ",".join(str(int(i)) for i in request["ids"]) or "NULL"
                cat.write_equality_deletes(request["table"], f"SELECT id FROM VALUES {ids} AS k(id)", ("id",))
                answer = True
            elif op == "rows":
                cat = catalogs[request["name"]]
                df = cat.sql(f"SELECT * FROM {cat.fq(request['table'])} VERSION AS OF {int(request['snapshot'])}")
                pq.write_table(spark_df_to_arrow(df), request["out"])
                answer = True
            elif op == "close":
                catalogs.pop(request["name"], None)
                answer = True
            else:
                raise ValueError(f"unknown op {op!r}")
            print(json.dumps({"ok": answer}), file=stdout, flush=True)
        except Exception as exc:  # noqa: BLE001 - answered to the harness, which records it
            detail = traceback.format_exc(limit=3).strip().splitlines()[-1]
            text = f"{type(exc).__name__}: {exc}"
            locked = "SQLITE_BUSY" in text or "database is locked" in text  # deep in a Java cause chain
            answer = {"error": ("catalog locked: " if locked else "") + text[:2000], "where": detail}
            print(json.dumps(answer), file=stdout, flush=True)
    spark.stop()


if __name__ == "__main__":
    out = sys.stdout
    sys.stdout = sys.stderr  # Spark's and py4j's prints go to the log, not into the protocol
    serve(sys.stdin, out)
