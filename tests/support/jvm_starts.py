"""Child processes that start icetail's local Spark session, and Java runtimes to start it on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# a child's local session: its JVM's pid and the class data archives (.jsa) its JVM maps, as JSON
START = """
import json, sys
from icetail.reader.spark.session import spark_session
spark = spark_session()
jvm = spark.sparkContext._jvm
pid = int(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid())
with open(f"/proc/{pid}/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")})
assert spark.range(3).count() == 3
print(json.dumps({"jvm_pid": pid, "mapped": mapped}))
"""

# the JDK modules the image's runtime holds (the Dockerfile's JAVA_MODULES)
_DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def start_child(env: Mapping[str, str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run START in a child; with `check`, fail the test unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-c", START], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert not check or done.returncode == 0, done.stderr[-3000:]
    return done


def started(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """What START printed: its JVM's pid and mapped archives."""
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def image_java_modules() -> str:
    for line in _DOCKERFILE.read_text().splitlines():
        if line.startswith("ARG JAVA_MODULES="):
            return line.split("=", 1)[1]
    raise AssertionError("the Dockerfile names no JAVA_MODULES")


def jlink_runtime(java_home: Path, dest: Path, *, class_data: bool) -> Path:
    """A Java runtime as the image builds one (`jlink`, the image's modules), with or without its base
    class data archive (`--generate-cds-archive`)."""
    command = [str(java_home / "bin" / "jlink"), "--add-modules", image_java_modules(), "--no-man-pages",
               "--no-header-files", "--output", str(dest)]  # fmt: skip
    if class_data:
        command.append("--generate-cds-archive")
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return dest
