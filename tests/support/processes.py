"""`icetail` child processes: the command, its environment (catalogs, Spark scratch), one run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.catalogs import LocalCatalog

REPO_ROOT = Path(__file__).resolve().parents[2]


# what a child must not inherit from the test runner's own environment: the children get their
# configuration from the test alone
INHERITED_NEVER = ("ICETAIL_", "PYICEBERG_", "SPARK_", "PYSPARK_")
# the JVM class cache all children share (reader/spark/class_cache.py): one child's JVM writes it, the
# later ones start in about half the time; kept between runs, per pyspark and Java install
CHILD_CLASS_CACHE = Path(tempfile.gettempdir()) / f"icetail-tests-jvm-cache-{os.getuid()}"


# a local session started and stopped: its JVM writes the children's class cache as it exits
_WARM_CLASS_CACHE = "from icetail.reader.spark.session import spark_session; spark_session().range(1).count()"


def warm_child_class_cache() -> subprocess.Popen[bytes] | None:
    """Start, in the background, a child whose JVM writes the shared class cache when it exits (once
    per pyspark and Java install; kept between runs). Without it the cache's first writer is whichever
    test child starts first, and the crash tests' SIGKILLs took the first writers with them."""
    from icetail.reader.spark.class_cache import class_cache

    env = child_env(spark_dir=CHILD_CLASS_CACHE / "warm-up-spark")
    cache = class_cache(env)
    if cache is None or cache.archive.exists():
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _WARM_CLASS_CACHE],
        env=env,
        cwd=CHILD_CLASS_CACHE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the test session's process group: a test's group kill misses it
    )


def child_env(
    catalogs: Sequence[LocalCatalog] = (),
    spark_dir: Path | None = None,
    *,
    extra: Mapping[str, str] | None = None,
    fast_jvm: bool = True,
) -> dict[str, str]:
    """The environment of an `icetail` child process: the test's own without ICETAIL_* / PYICEBERG_* /
    SPARK_* leftovers, plus `catalogs`, Spark scratch under `spark_dir`, loopback Spark, this Python
    and this checkout, then `extra`.

    `fast_jvm`: C1-only JIT and serial GC for the child's Spark JVM (JVM start-ups dominate these
    tests' run time; the JVM then prints one "Picked up JDK_JAVA_OPTIONS" line on stderr).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED_NEVER)}
    if fast_jvm:
        env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    for cat in catalogs:
        env.update(cat.env())
    if spark_dir is not None:
        spark_dir.mkdir(parents=True, exist_ok=True)
        env["SPARK_LOCAL_DIRS"] = str(spark_dir)  # a killed JVM leaves its scratch here, not in /tmp
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        ICETAIL_JVM_CLASS_CACHE=str(CHILD_CLASS_CACHE),
        # as in tests/conftest.py: a child's `changes` reads on Spark unless its test asks for the
        # in-process engine (tests/unit/cli/test_local_engine_cli.py drops this to get `auto`)
        ICETAIL_LOCAL_MAX_BYTES="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p),
    )
    env.update(extra or {})
    if extra and "JAVA_HOME" in extra and "ICETAIL_JVM_CLASS_CACHE" not in extra:
        # a test's own java (a launch counter in its tmp folder) is a new cache key each run: no cache
        env["ICETAIL_JVM_CLASS_CACHE"] = "off"
    return env


def icetail_command() -> list[str]:
    """The installed `icetail` console script (as users run it), else `python -m monitor.cli`."""
    script = Path(sys.executable).with_name("icetail")
    return [str(script)] if script.exists() else [sys.executable, "-m", "icetail.monitor.cli.main"]


def run_icetail(
    args: Sequence[str], env: dict[str, str], *, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*icetail_command(), *args],
        env=env,
        cwd=cwd or REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# What a Spark JVM itself prints on stderr when it starts: the tests' JVM options (child_env),
# and Spark 4's launcher adding the incubating vector module. Not icetail's output.
JVM_START_NOTES = (
    "NOTE: Picked up JDK_JAVA_OPTIONS",
    "Picked up JAVA_TOOL_OPTIONS",
    "WARNING: Using incubator modules",
)


def icetail_lines(stderr: str) -> list[str]:
    """stderr of an icetail child without the JVM's own start-up notes."""
    return [line for line in stderr.splitlines() if not line.startswith(JVM_START_NOTES)]
