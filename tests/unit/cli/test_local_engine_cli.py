"""`icetail changes` of a small range in process: no pyspark, no py4j, no JVM; `plan` names the engine.

The command runs in a fresh interpreter that lists the modules it imported (as test_cli_imports
does) with a `java` on JAVA_HOME and PATH that leaves a mark and fails: a Spark start would both
import py4j and run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from icetail.monitor.cli.main import main
from tests.support.small_table import SmallTable
from tests.unit.cli.test_cli_imports import ENTRY, ROOT

SPARK_MODULES = ("pyspark", "py4j")


def _fake_java(tmp_path: Path) -> tuple[Path, Path]:
    """A JAVA_HOME whose bin/java writes `marker` and fails."""
    home, marker = tmp_path / "jdk", tmp_path / "java-was-started"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    java.chmod(0o755)
    return home, marker


def _changes(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    home, marker = _fake_java(tmp_path)
    listing, output = tmp_path / "modules.json", tmp_path / "out.parquet"
    path = f"{home / 'bin'}:{os.environ['PATH']}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAVA_HOME": str(home), "PATH": path}
    env.pop("ICETAIL_LOCAL_MAX_BYTES", None)  # the default threshold, as a user has it
    argv = ["changes", "--catalog", "core", "--table", "ns.t", "--output", str(output), *flags]
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, str(listing), *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )
    spark = [m for m in json.loads(listing.read_text()) if m.split(".")[0] in SPARK_MODULES]
    assert not marker.exists() or done.returncode != 0, "java ran, yet the command succeeded"
    return done, spark, marker


def test_a_small_changes_imports_no_pyspark_and_starts_no_jvm(small_table: SmallTable, tmp_path: Path) -> None:
    done, spark, marker = _changes(tmp_path)
    assert done.returncode == 0, done.stderr
    assert spark == [], spark
    assert not marker.exists(), "a JVM was started"
    kinds = sorted((r["id"], r["_change_type"]) for r in pq.read_table(tmp_path / "out.parquet").to_pylist())
    assert kinds == [(1, "INSERT"), (2, "DELETE"), (2, "INSERT"), (3, "INSERT"), (4, "INSERT"), (5, "INSERT")]


def test_the_harness_sees_spark_when_spark_is_asked_for(small_table: SmallTable, tmp_path: Path) -> None:
    """The same harness with --engine spark: pyspark loads and the fake java is run (and fails)."""
    done, spark, marker = _changes(tmp_path, "--engine", "spark")
    assert done.returncode != 0
    assert "pyspark" in {m.split(".")[0] for m in spark}
    assert marker.exists()


def test_a_threshold_below_the_range_reads_on_spark(small_table: SmallTable, tmp_path: Path) -> None:
    """auto with --local-max-bytes under the range's size: the summaries say big, Spark starts."""
    done, _, marker = _changes(tmp_path, "--local-max-bytes", "100")
    assert done.returncode != 0 and marker.exists()


def test_plan_names_the_engine_and_why(
    small_table: SmallTable, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("ICETAIL_LOCAL_MAX_BYTES", raising=False)
    assert main(["plan", "--catalog", "core", "--table", "ns.t"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("engine: local (reads ") and "at most --local-max-bytes 64.0 MiB" in last, last
    assert main(["plan", "--catalog", "core", "--table", "ns.t", "--local-max-bytes", "100", "--json"]) == 0
    engine = json.loads(capsys.readouterr().out)["engine"]
    assert engine["name"] == "spark" and "more than --local-max-bytes 100 B" in engine["reason"], engine
    assert main(["plan", "--catalog", "core", "--table", "ns.t", "--engine", "local", "--local-max-bytes", "0"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "engine: local (--engine local)"
