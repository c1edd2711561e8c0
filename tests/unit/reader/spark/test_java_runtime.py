"""No Java for Spark: one line saying Java 17 is needed and how to point at it (issue 25)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.reader.spark.java_runtime import installed_java_17
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.java_launches import path_without_java
from tests.support.processes import child_env, icetail_lines, run_icetail

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture
def source(tmp_path: Path) -> LocalCatalog:
    cat = new_catalog(tmp_path / "cat", "nojava")
    cat.catalog().create_namespace("ns")
    cat.catalog().create_table("ns.t", schema=SCHEMA).append(pa.table({"id": [1]}, SCHEMA))
    return cat


def _changes(cat: LocalCatalog, tmp_path: Path, env_changes: dict[str, str]) -> tuple[int, list[str]]:
    env = child_env([cat], tmp_path / "spark")
    env.pop("JAVA_HOME", None)
    env.update(env_changes)
    done = run_icetail(["changes", "--catalog", "nojava", "--table", "ns.t", "--output", "-"], env, timeout=120)
    assert done.stdout == ""
    return done.returncode, icetail_lines(done.stderr)


def test_no_java_on_path_and_no_java_home(source: LocalCatalog, tmp_path: Path) -> None:
    path = path_without_java(tmp_path, os.environ["PATH"])
    assert shutil.which("java", path=path) is None
    code, lines = _changes(source, tmp_path, {"PATH": path})
    assert (code, len(lines)) == (2, 1), lines
    assert "Spark needs Java 17, and there is no java on PATH and JAVA_HOME is not set" in lines[0], lines
    found = installed_java_17()
    if found:  # the hint is the export that works here
        assert lines[0].endswith(f": export JAVA_HOME={found}"), lines


def test_java_home_without_java(source: LocalCatalog, tmp_path: Path) -> None:
    code, lines = _changes(source, tmp_path, {"JAVA_HOME": str(tmp_path)})
    assert (code, len(lines)) == (2, 1), lines
    assert f"Spark needs Java 17, but JAVA_HOME={tmp_path} has no bin/java" in lines[0], lines
