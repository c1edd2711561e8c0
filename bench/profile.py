"""`bench.run profile`: the append read in a loop, to run under py-spy or pyinstrument."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from bench import generate as gen
from bench.harness import REPO, log
from bench.procs import cpu_by_kind
from bench.readers import read_icetail, read_pool, read_raw, read_splits_inprocess, read_threads
from bench.results import ratio
from bench.session import CATALOG, catalog_paths


def profile_target(args: argparse.Namespace, scale: gen.Scale) -> int:
    """`profile`: the append read of the main data set, `--iterations` times, for py-spy / pyinstrument.

    Uses icetail's own session (`icetail.reader.spark.session.spark_session`, no Java Iceberg jars) and its own
    catalog under `<workdir>/profile-catalog`, so it can run beside nothing else.
    """
    from pyiceberg.catalog import load_catalog

    from icetail.reader.spark.session import spark_session

    workdir = Path(args.workdir).resolve()
    data = gen.generate(workdir, scale, args.seed, log=log)
    root, _, _ = catalog_paths(workdir, "profile-catalog")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    catalog = load_catalog(CATALOG)
    catalog.create_namespace("ns")

    tables = gen.PyicebergTables(catalog)
    gen.create_table(tables, "prof")
    seed = gen.seed_snapshot(tables, "prof", data)
    last = gen.add_files(tables, "prof", data.files)
    table = tables.load_table("prof")
    fast = ("ICETAIL_BENCH_FAST_METADATA", "ICETAIL_BENCH_FAST_INSERTS")
    if any(os.environ.get(name) == "1" for name in fast) and args.mode != "spark":
        import bench.cases.fastdaemon  # noqa: F401 - applies the experiment's patches in this process
    if args.mode == "inprocess":
        read = lambda: read_splits_inprocess(table, seed, last, encode=True)  # noqa: E731
    elif args.mode == "threads":
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(os.cpu_count() or 2)
        read = lambda: read_threads(table, seed, last, pool)  # noqa: E731
    elif args.mode == "pool":
        from concurrent.futures import ProcessPoolExecutor

        executor = ProcessPoolExecutor(os.cpu_count() or 2)
        read_pool(table, seed, last, executor)  # warm-up: worker processes and their imports
        read = lambda: read_pool(table, seed, last, executor)  # noqa: E731
    else:
        # workers must be able to import bench.cases.fastdaemon if --spark-conf names it
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        conf = dict(item.split("=", 1) for item in args.spark_conf)
        spark = spark_session(conf=conf)
        read_icetail(table, seed, last, spark)  # warm-up
        read = lambda: read_icetail(table, seed, last, spark)  # noqa: E731
    for i in range(args.iterations):
        before = cpu_by_kind()
        timing = read()
        cpu = {k: round(v - before[k], 2) for k, v in cpu_by_kind().items()}
        raw = read_raw(data.files) if args.raw else None
        log(
            f"profile read {i + 1}: {timing.seconds:.2f}s, {timing.rows_per_second / 1e6:.2f} M rows/s, "
            f"cpu seconds {cpu}" + (f"; raw pyarrow {raw.seconds:.2f}s, ratio {ratio(raw, timing)}x" if raw else "")
        )
    return 0
