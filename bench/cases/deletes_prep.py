"""The delivered case's delete snapshots, written by Java Iceberg (run with the pyspark 3.5 venv).

pyiceberg cannot write position deletes or deletion vectors, and the pyspark 4 venv has no
Iceberg jars, so `bench.cases.delivered --deletes` runs this module with `.venv/bin/python`:
it registers the data set twice in a fresh catalog under `<workdir>/delivered-deletes-catalog`
(the SQLite file is shared by Java's JdbcCatalog and pyiceberg's SQL catalog), then a Spark SQL
DELETE of 10% of the rows (merge-on-read) on a v2 table (position deletes) and on a v3 table
(deletion vectors). It prints one JSON line: each table's append and delete snapshot ids.

    .venv/bin/python -m bench.cases.deletes_prep --rows 8000000 --files 8
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402

CATALOG = "icedel"
PREDICATE = "id % 10 = 7"
TABLES = (("pos", 2), ("dv", 3))  # name, format version


def catalog_root(workdir: Path) -> Path:
    return workdir / "delivered-deletes-catalog"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.deletes_prep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/icetail-bench")
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20260101)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    scale = gen.scale_with(gen.SCALES["small"], rows=args.rows, files=args.files, row_group_rows=args.row_group_rows)
    data = gen.generate(workdir, scale, args.seed, log=lambda m: print(m, file=sys.stderr))

    from bench.session import start_session
    from tests.support.javaref import new_catalog

    root = catalog_root(workdir)
    shutil.rmtree(root, ignore_errors=True)
    spark = start_session("2g")
    catalog = new_catalog(spark, root, name=CATALOG)
    out: dict[str, dict[str, int]] = {}
    for name, version in TABLES:
        gen.create_table(catalog, name)
        gen.seed_snapshot(catalog, name, data)
        appended = gen.add_files(catalog, name, data.files)
        if version == 3:
            gen.upgrade_to_v3(catalog, name)
        deleted = gen.spark_delete(catalog, name, PREDICATE)
        out[name] = {"appended": appended, "deleted": deleted, "format_version": version}
    spark.stop()
    print(json.dumps({"root": str(root), "tables": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
