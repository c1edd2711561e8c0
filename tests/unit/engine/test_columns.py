"""`changes --columns a,b`: only those data columns, then the changelog columns; the rows are unchanged
(updates still pair by a key left out of the output)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.catalogs import LocalCatalog
from tests.support.java_launches import counting_java
from tests.support.processes import child_env, icetail_lines, run_icetail
from tests.support.source_table import new_source_table


@pytest.fixture
def source(tmp_path: Path) -> LocalCatalog:
    """An append of ids 0-3, then one overwrite snapshot that changes `v` of ids 0 and 1."""
    table = new_source_table(tmp_path / "cat", "cols")
    table.commit("append")
    table.commit("upsert")
    return LocalCatalog("cols", tmp_path / "cat")


def _changes(cat: LocalCatalog, tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    env = child_env([cat], tmp_path / "spark", extra={"JAVA_HOME": str(counting_java(tmp_path).home)})
    done = run_icetail(["changes", "--catalog", "cols", "--table", "ns.t", *args], env, timeout=300)
    return done.returncode, icetail_lines(done.stderr)


def test_columns_keep_the_rows_and_the_changelog_columns(source: LocalCatalog, tmp_path: Path) -> None:
    target = tmp_path / "o.parquet"
    code, lines = _changes(source, tmp_path, "--columns", "v", "--identifier-columns", "id", "--output", str(target))
    assert code == 0, lines
    rows = pq.read_table(target)
    assert rows.column_names == ["v", "_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp"]
    got = sorted((r["_change_ordinal"], r["_change_type"], r["v"]) for r in rows.to_pylist())
    assert [g for g in got if g[0] > 0] == [
        (1, "UPDATE_AFTER", "r0-0-u1"),
        (1, "UPDATE_AFTER", "r0-1-u1"),
        (1, "UPDATE_BEFORE", "r0-0"),
        (1, "UPDATE_BEFORE", "r0-1"),
    ]  # paired by id, which is not in the output


def test_an_unknown_column_is_one_line_before_spark(source: LocalCatalog, tmp_path: Path) -> None:
    code, lines = _changes(source, tmp_path, "--columns", "v,nope", "--output", "-")
    assert (code, len(lines)) == (2, 1), lines
    assert "--columns: no column 'nope' in the change rows; top-level data columns: id, v, n" in lines[0]
    assert counting_java(tmp_path).count() == 0


def test_the_python_api_takes_the_same_projection(source: LocalCatalog, spark: object) -> None:
    import icetail
    from icetail.kernel.errors import ConfigError

    table = source.catalog().load_table("ns.t")
    whole = icetail.read_changes(table, identifier_columns=["id"], spark=spark)
    projected = icetail.read_changes(table, identifier_columns=["id"], columns=["v"], spark=spark)
    changelog = ["_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp"]
    assert projected.column_names == ["v", *changelog]
    assert projected.to_pylist() == whole.select(projected.column_names).to_pylist()  # the same rows
    with pytest.raises(ConfigError, match="columns: no column 'nope'"):
        icetail.read_changes(table, columns=["nope"])
