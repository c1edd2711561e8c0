"""The bench's catalog (pyiceberg SQL on the Java reference's SQLite file) and SparkSession."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import bench.harness  # noqa: F401 - puts the repository on sys.path for `tests.support`

CATALOG = "icebench"


def catalog_paths(workdir: Path, sub: str = "catalog") -> tuple[Path, Path, Path]:
    root = workdir / sub
    return root, (root / "catalog.db").resolve(), (root / "warehouse").resolve()


def catalog_env(workdir: Path, sub: str = "catalog") -> dict[str, str]:
    """PYICEBERG_* variables for the bench catalog (pyiceberg reads them when it is first imported)."""
    _, db, warehouse = catalog_paths(workdir, sub)
    key = CATALOG.upper()
    return {
        f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
        f"PYICEBERG_CATALOG__{key}__URI": f"sqlite:///{db}",
        f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{warehouse}",
    }


def bench_spark_conf(driver_memory: str) -> dict[str, str]:
    """tests/support/javaref's session plus icetail's defaults, with the JIT left at full strength."""
    from icetail.reader.spark.session import C1_ONLY, DEFAULT_CONF
    from tests.support.javaref import spark_conf

    conf = {**spark_conf(), **DEFAULT_CONF}
    # what reader.spark.spark_session adds for a local master (the production path), when present
    import importlib.util

    if importlib.util.find_spec("icetail.reader.spark.daemon") is not None:
        conf["spark.python.daemon.module"] = "icetail.reader.spark.daemon"
    conf.update(
        {
            "spark.master": f"local[{os.cpu_count() or 2}]",
            "spark.app.name": "icetail-bench",
            "spark.driver.memory": driver_memory,
            "spark.sql.shuffle.partitions": str(os.cpu_count() or 2),
            "spark.default.parallelism": str(os.cpu_count() or 2),
            # C1 only (javaref's and icetail's default) would handicap the Java reader
            "spark.driver.extraJavaOptions": DEFAULT_CONF["spark.driver.extraJavaOptions"].replace(C1_ONLY, "").strip()
            + " -XX:+UseParallelGC",
        }
    )
    return conf


def start_session(driver_memory: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in bench_spark_conf(driver_memory).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
