"""Shared fixtures: one SparkSession with the Java Iceberg reference, one fresh catalog per test.

* `spark` (session): local[2] SparkSession with iceberg-spark-runtime 1.10.2, the relocated Jackson
  (tests/support/shade_jackson.py), sqlite-jdbc and Iceberg's SQL extensions. No catalog is
  configured on it; `SparkSession.builder.getOrCreate()` elsewhere returns this session.
* `catalog` (function): a `tests.support.javaref.JavaCatalog` - a JDBC/SQLite Iceberg catalog
  registered in Spark under a unique name plus pyiceberg's `SqlCatalog` on the same file, in
  tmp_path, with namespace `ns` created. See `catalog.env()` for the PYICEBERG_* variables.

Tests that use `catalog` get the `java` marker automatically. ICETAIL_LOCAL_MAX_BYTES is 0 unless
set: `engine="auto"` reads on Spark, and a test that wants the in-process engine asks for it.

Tests marked `once` (long process-level tests: SIGKILL crash loops, services, object stores,
whose behaviour does not depend on the Spark line) run on one line only: `make test` runs both
lines, and running them twice would only double the suite's longest tests. Most run on the
Spark 4 line that `pip install icetail` resolves; the modules in ONCE_ON_SPARK35 run on the 3.5
line, to balance the two lines' times. The folders in SPARK_FREE hold tests that never touch
Spark's data path (the checkpoint stores): both venvs have the same packages but pyspark, so
they are `once` too, on the 3.5 line.

On Spark 4 (the pyspark `pip install icetail` resolves) the Java reference cannot load: its
runtime jar exists for Spark 3.5 (Scala 2.12) only. There `spark` is icetail's own session and
`catalog` skips, saying so; the same tests run against Java on the Spark 3.5 line (`make test`
runs both lines).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.javaref import JAVA_REFERENCE_RUNS, JavaCatalog, build_spark_session, new_catalog

_JAVA_FIXTURES = {"catalog"}
# `engine="auto"` would read every small test table in process: the suite keeps testing the Spark
# path unless a test asks for an engine (tests/support/engines.py runs both, differential tests)
os.environ.setdefault("ICETAIL_LOCAL_MAX_BYTES", "0")
# the test process's own JVM neither maps nor writes the JVM class cache (reader/spark/class_cache.py):
# as its writer it would hold the dump lock for the whole run; the children share one cache instead
# (tests/support/processes.py), and tests/unit/reader/spark/test_class_cache.py tests the cache itself
os.environ.setdefault("ICETAIL_JVM_CLASS_CACHE", "off")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if JAVA_REFERENCE_RUNS:
        session = build_spark_session()
    else:
        from icetail.reader.spark.session import spark_session

        session = spark_session(conf={"spark.sql.session.timeZone": "UTC"})
    yield session
    session.stop()


@pytest.fixture
def catalog(spark: Any, tmp_path: Any) -> JavaCatalog:
    if not JAVA_REFERENCE_RUNS:
        pytest.skip("the Java Iceberg reference (iceberg-spark-runtime-3.5) runs on the Spark 3.5 line only")
    return new_catalog(spark, tmp_path / "iceberg")


@pytest.fixture
def pg_state(tmp_path: Any) -> Iterator[str]:
    """A PostgreSQL checkpoint store URL in a fresh schema, dropped at teardown (skipped without a server)."""
    from tests.support.stores import drop_state, new_state_url, pg_unavailable

    if reason := pg_unavailable():
        pytest.skip(reason)
    url = new_state_url("postgresql", tmp_path)
    yield url
    drop_state(url)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The children's JVM class cache is written first thing, beside the collection (processes.py)."""
    from tests.support.processes import warm_child_class_cache

    session.config.stash[_CLASS_CACHE_WRITER] = warm_child_class_cache()  # kept: it runs on after this hook


_CLASS_CACHE_WRITER = pytest.StashKey[object]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _JAVA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.java)
        if _module_of(item).startswith(SPARK_FREE):
            item.add_marker(pytest.mark.once)
    # a `once` test runs on one line: the Spark 3.5 line for the modules named in ONCE_ON_SPARK35,
    # the Spark 4 line for the others (a `once` test that needs Java runs on the 3.5 line only)
    elsewhere = [
        i
        for i in items
        if i.get_closest_marker("once")
        and not i.get_closest_marker("java")
        and (_module_of(i) in ONCE_ON_SPARK35 or _module_of(i).startswith(SPARK_FREE)) != JAVA_REFERENCE_RUNS
    ]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]


# `once` modules run on the Spark 3.5 line, so that the two lines of `make test`, which run at
# the same time, take about as long (the Spark 4 line alone took 30 of the suite's 30 minutes)
ONCE_ON_SPARK35 = frozenset(
    {
        "tests/pipeline/test_crash.py",
        "tests/pipeline/test_jvm_killed.py",
        "tests/pipeline/test_pg_mirror_crash.py",
        "tests/service/test_local_disk_full.py",
        "tests/service/test_serve_setup_errors.py",
        "tests/pipeline/test_setup_refusals.py",
        "tests/storage/test_s3_crash.py",
        "tests/storage/test_rest_catalog.py",
    }
)


# folders of tests that never touch Spark's data path: the same on both lines (the Spark 3.5 one runs them)
SPARK_FREE = ("tests/state/",)


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
