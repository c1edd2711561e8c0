"""`run --net` of one big batch: the driver fold against the fold in partitions (reader/changes/net_shuffle.py).

    PYTHONPATH=$PWD .venv/bin/python -m bench.net_fold_run --workdir /tmp/icetail-netfold [--rows N]
        [--files N] [--rounds N] [--updated N] [--partition-bytes N] [--reuse] [--v3]

The table (pyiceberg, SQL catalog in the workdir): `--rows` rows (id, v, d) appended in about
`--files` files of ascending ids, then `--rounds` overwrites that each replace `--updated`
consecutive ids with new versions (pyiceberg: a copy-on-write delete that rewrites the files the
range cuts, carry-overs included, then an append). One consumer delivers the whole history as
one net batch (every row inserted once, at its last version) into a parquet sink, twice, each
in a fresh child process: `--reconcile-partition-bytes 0` (the fold in the driver) and
`--partition-bytes` (default 8 MiB: the fold in Spark tasks). Printed per mode: wall seconds,
net rows, chunks, and the peak RSS of the Python driver, the JVM and the Python workers
(bench/procs.py, sampled every 20 ms). `--v3`: Java Iceberg (Spark 3.5) writes a format-version 3
copy-on-write table instead (the load, then `--rounds` UPDATEs of `--updated` consecutive ids,
which keep row lineage), so the fold is keyed by `_row_id` (four shuffles). bench/RESULTS.md (R38)
has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

TABLE = "bench.netfold"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("d", pa.float64())])


def _catalog(workdir: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = workdir / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("netfold", uri=f"sqlite:///{workdir}/catalog.db", warehouse=f"file://{warehouse}")


def _rows(ids: np.ndarray, version: int) -> pa.Table:
    return pa.table(
        {"id": ids, "v": pa.array([f"v{i}-{version}" for i in ids.tolist()]), "d": ids * 0.25}, schema=SCHEMA
    )


def build(workdir: Path, rows: int, files: int, rounds: int, updated: int) -> None:
    """The table: a load of `rows`, then `rounds` overwrites of `updated` consecutive ids each."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    catalog = _catalog(workdir)
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(
        TABLE,
        schema=SCHEMA,
        properties={"write.target-file-size-bytes": str(max(1 << 20, rows * 14 // files))},
    )
    table.append(_rows(np.arange(rows, dtype=np.int64), 0))
    rng = np.random.default_rng(7)
    for round_ in range(1, rounds + 1):
        lo = int(rng.integers(0, rows - updated))
        table = catalog.load_table(TABLE)
        table.overwrite(
            _rows(np.arange(lo, lo + updated, dtype=np.int64), round_),
            overwrite_filter=And(GreaterThanOrEqual("id", lo), LessThan("id", lo + updated)),
        )


V3_CATALOG, V3_TABLE = "netfoldv3", "ns.t"


def build_v3(workdir: Path, rows: int, files: int, rounds: int, updated: int) -> dict[str, str]:
    """The v3 table, written by Java; the environment that names its catalog."""
    from bench.session import start_session
    from tests.support.javaref import new_catalog

    spark = start_session("2g")
    catalog = new_catalog(spark, workdir / "v3", name=V3_CATALOG)
    modes = ", ".join(f"'write.{kind}.mode'='copy-on-write'" for kind in ("delete", "update", "merge"))
    catalog.sql(
        "CREATE TABLE {cat}.ns.t (id bigint, v string, d double) USING iceberg "
        f"TBLPROPERTIES ('format-version'='3', {modes})"
    )
    catalog.sql(
        f"INSERT INTO {{cat}}.ns.t SELECT /*+ REPARTITION_BY_RANGE({files}, id) */ id, concat('v', id), id * 0.25D "
        f"FROM range({rows})"
    )
    rng = np.random.default_rng(7)
    for _ in range(rounds):
        lo = int(rng.integers(0, rows - updated))
        catalog.sql(f"UPDATE {{cat}}.ns.t SET v = concat(v, '-u') WHERE id >= {lo} AND id < {lo + updated}")
    env = catalog.env()
    spark.stop()
    return env


def measure(workdir: Path, mode: str, partition_bytes: int, catalog: str, table: str) -> dict[str, Any]:
    """One delivery of the whole history as one net batch, in this process; its figures."""
    from bench.procs import RssSampler
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline
    from icetail.reader.spark.session import spark_session

    out = workdir / mode
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config = PipelineConfig(
        catalog,
        table,
        f"sqlite:///{out}/state.db",
        f"parquet://{out}/sink",
        consumer=mode,
        net=True,
        identifier_columns=("id",),
        reconcile_partition_bytes=0 if mode == "driver" else partition_bytes,
    )
    spark = spark_session()
    with RssSampler() as sampler:
        started = time.perf_counter()
        with Pipeline(config, spark=spark) as pipeline:
            outcomes = pipeline.run()
        seconds = time.perf_counter() - started
    assert outcomes and all(o.completed for o in outcomes), outcomes
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "net_rows": sum(sum(o.rows_by_change_type.values()) for o in outcomes),
        "chunks": sum(o.chunks for o in outcomes),
        "peak_mb": {kind: round(value / 2**20) for kind, value in sampler.peak.items()},
        "load": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/icetail-netfold"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--updated", type=int, default=200_000)
    parser.add_argument("--partition-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--reuse", action="store_true", help="keep a table built before")
    parser.add_argument("--v3", action="store_true", help="a v3 table written by Java (row lineage)")
    parser.add_argument("--measure", choices=("driver", "partitioned"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    catalog, table = (V3_CATALOG, V3_TABLE) if args.v3 else ("netfold", TABLE)
    if args.measure:
        print(json.dumps(measure(args.workdir, args.measure, args.partition_bytes, catalog, table)))
        return
    saved = args.workdir / "env.json"
    if not (args.reuse and saved.exists()):
        shutil.rmtree(args.workdir, ignore_errors=True)
        args.workdir.mkdir(parents=True)
        started = time.perf_counter()
        if args.v3:
            catalog_env = build_v3(args.workdir, args.rows, args.files, args.rounds, args.updated)
        else:
            build(args.workdir, args.rows, args.files, args.rounds, args.updated)
            catalog_env = {
                "PYICEBERG_CATALOG__NETFOLD__TYPE": "sql",
                "PYICEBERG_CATALOG__NETFOLD__URI": f"sqlite:///{args.workdir}/catalog.db",
                "PYICEBERG_CATALOG__NETFOLD__WAREHOUSE": f"file://{args.workdir}/warehouse",
            }
        saved.write_text(json.dumps(catalog_env))
        print(f"built {args.rows:,} rows + {args.rounds} rewrites in {time.perf_counter() - started:.1f} s")
    env = {**os.environ, **json.loads(saved.read_text())}
    for mode in ("driver", "partitioned"):
        command = [sys.executable, "-m", "bench.net_fold_run", "--workdir", str(args.workdir), "--measure", mode]
        command += ["--partition-bytes", str(args.partition_bytes)] + (["--v3"] if args.v3 else [])
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"{mode} failed:\n{done.stderr[-4000:]}")
        print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
