"""`icetail` child processes: the command, its environment (catalogs, Spark scratch), one run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.catalogs import LocalCatalog

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_env(catalogs: Sequence[LocalCatalog], spark_dir: Path, *, fast_jvm: bool = True) -> dict[str, str]:
    """The environment of an `icetail` child process: the catalogs, Spark scratch under `spark_dir`.

    `fast_jvm`: C1-only JIT for the child's Spark JVM (starts ~30% faster; the JVM then prints
    one "Picked up JDK_JAVA_OPTIONS" line on stderr when Spark starts).
    """
    env = dict(os.environ)
    if fast_jvm:
        env["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1"
    for cat in catalogs:
        env.update(cat.env())
    spark_dir.mkdir(parents=True, exist_ok=True)
    env["SPARK_LOCAL_DIRS"] = str(spark_dir)  # a killed JVM leaves its scratch here, not in /tmp
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
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


# What a Spark JVM itself prints on stderr when it starts: the tests' C1-only JIT option
# (child_env), and Spark 4's launcher adding the incubating vector module. Not icetail's output.
JVM_START_NOTES = (
    "NOTE: Picked up JDK_JAVA_OPTIONS",
    "Picked up JAVA_TOOL_OPTIONS",
    "WARNING: Using incubator modules",
)


def icetail_lines(stderr: str) -> list[str]:
    """stderr of an icetail child without the JVM's own start-up notes."""
    return [line for line in stderr.splitlines() if not line.startswith(JVM_START_NOTES)]
