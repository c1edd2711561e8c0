"""Spark's Python workers set to an interpreter that cannot read: said up front, in one line (issue 25)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.java_launches import CountingJava, counting_java
from tests.support.processes import child_env, icetail_lines, run_icetail

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture
def source(tmp_path: Path) -> LocalCatalog:
    cat = new_catalog(tmp_path / "cat", "workers")
    cat.catalog().create_namespace("ns")
    cat.catalog().create_table("ns.t", schema=SCHEMA).append(pa.table({"id": [1]}, SCHEMA))
    return cat


@pytest.fixture
def bare_python(tmp_path: Path) -> str:
    """A venv of this Python without icetail's dependencies: a venv used without activating the right one."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    return str(tmp_path / "bare" / "bin" / "python")


def _changes(cat: LocalCatalog, java: CountingJava, tmp_path: Path, extra: dict[str, str]) -> tuple[int, list[str]]:
    env = child_env([cat], tmp_path / "spark", extra={"JAVA_HOME": str(java.home), **extra})
    done = run_icetail(["changes", "--catalog", "workers", "--table", "ns.t", "--output", "-"], env, timeout=180)
    assert done.stdout == ""
    return done.returncode, icetail_lines(done.stderr)


def test_workers_python_without_pyarrow(source: LocalCatalog, bare_python: str, tmp_path: Path) -> None:
    java = counting_java(tmp_path)
    code, lines = _changes(source, java, tmp_path, {"PYSPARK_PYTHON": bare_python})
    assert (code, len(lines)) == (2, 1), lines
    assert f"Spark's Python workers would run {bare_python} (PYSPARK_PYTHON)" in lines[0], lines
    assert "No module named 'pyarrow'" in lines[0], lines
    driver = lines[0].rsplit("export PYSPARK_PYTHON=", 1)[1].split(" ", 1)[0]
    assert Path(driver).parent == Path(sys.executable).parent  # the venv icetail runs from
    assert java.count() == 0  # said before the JVM was started


def test_workers_python_missing(source: LocalCatalog, tmp_path: Path) -> None:
    java = counting_java(tmp_path)
    code, lines = _changes(source, java, tmp_path, {"PYSPARK_PYTHON": "python3.404"})
    assert (code, len(lines)) == (2, 1), lines
    assert "Spark's Python workers would run python3.404 (PYSPARK_PYTHON), which is not an executable here" in lines[0]


def test_workers_python_with_another_pyspark(source: LocalCatalog, tmp_path: Path) -> None:
    """Another venv's interpreter (as PYSPARK_PYTHON inherited from a pyspark 3.5 process): its workers
    would fail a 4.x driver's first task in Spark's handshake with a UnicodeDecodeError."""
    other = tmp_path / "other-pyspark"
    (other / "pyspark").mkdir(parents=True)
    (other / "pyspark" / "__init__.py").write_text('__version__ = "3.4.9"\n')
    wrapper = tmp_path / "other-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={other} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    java = counting_java(tmp_path)
    code, lines = _changes(source, java, tmp_path, {"PYSPARK_PYTHON": str(wrapper)})
    assert (code, len(lines)) == (2, 1), lines
    import pyspark

    assert f"which has pyspark 3.4.9 while the driver runs pyspark {pyspark.__version__}" in lines[0], lines
    assert java.count() == 0  # said before the JVM was started
