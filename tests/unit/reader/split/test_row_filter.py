"""`--filter EXPR` / `row_filter`: a filtered view's changes, files that cannot match left unread (issue 25)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.api import plan_range, read_changes
from icetail.monitor.engine.range_bounds import RangeBounds
from icetail.reader.split.row_filter import parse_row_filter
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.java_launches import counting_java
from tests.support.processes import child_env, icetail_lines, run_icetail

ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string())])
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    identifier_field_ids=[1],
)


@pytest.fixture
def regions(tmp_path: Path) -> tuple[LocalCatalog, Any]:
    """Three appends of disjoint id ranges (one file each), then an UPDATE moving rows across 'eu'."""
    cat = new_catalog(tmp_path / "cat", "rf")
    cat.catalog().create_namespace("ns")
    table = cat.catalog().create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"]}, ARROW))
    table.append(pa.table({"id": [10, 11], "region": ["us", "us"]}, ARROW))
    table.append(pa.table({"id": [20, 21], "region": ["eu", "ap"]}, ARROW))
    # copy-on-write overwrite of ids 1, 2, 20: 1 leaves eu, 2 enters eu, 20 stays in eu with a new value
    table.overwrite(
        pa.table({"id": [1, 2, 20, 3], "region": ["us", "eu", "eu", "eu"]}, ARROW),
        overwrite_filter="id in (1, 2, 3, 20)",
    )
    return cat, cat.catalog().load_table("ns.t")


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("_change_type", "id", "region")), strict=True))


def test_an_update_across_the_filter_is_a_delete_or_an_insert(spark: Any, regions: tuple[LocalCatalog, Any]) -> None:
    _, table = regions
    last = table.metadata.snapshots[-2:]
    out = read_changes(
        table,
        last[0].parent_snapshot_id,
        last[-1].snapshot_id,
        identifier_columns=["id"],
        row_filter="region = 'eu'",
        net=True,
    )
    # pyiceberg's overwrite is two snapshots (a delete, then an append); over both, net:
    # id 1 left 'eu': a DELETE; id 2 entered it: an INSERT; ids 3 and 20 came back unchanged
    assert rows(out) == [("DELETE", 1, "eu"), ("INSERT", 2, "eu")]
    whole = rows(read_changes(table, row_filter="region = 'eu'"))
    inserted = Counter((i, r) for t, i, r in whole if t == "INSERT")
    deleted = Counter((i, r) for t, i, r in whole if t == "DELETE")
    assert inserted - deleted == Counter({(2, "eu"): 1, (3, "eu"): 1, (20, "eu"): 1})  # the rows in 'eu' now


def test_files_that_cannot_match_are_not_planned(regions: tuple[LocalCatalog, Any]) -> None:
    _, table = regions
    appends = table.metadata.snapshots[:3]
    plan = plan_range(table, RangeBounds(None, appends[-1].snapshot_id), row_filter="id >= 10 and id < 20")
    assert plan.files_pruned == 2  # the files of ids 1..3 and 20..21, by their column bounds
    assert [t.commit.snapshot_id for t in plan.tasks] == [appends[1].snapshot_id]
    assert plan_range(table, RangeBounds(None, appends[-1].snapshot_id)).files_pruned == 0


def test_bad_filters_are_one_line_before_anything_is_read(regions: tuple[LocalCatalog, Any]) -> None:
    _, table = regions
    with pytest.raises(ConfigError, match="does not fit ns.t: .*nosuch.*its columns are id, region"):
        read_changes(table, row_filter="nosuch = 1")
    with pytest.raises(ConfigError, match="is not a pyiceberg expression"):
        read_changes(table, row_filter="id >")
    with pytest.raises(ConfigError, match="--verify strict .* --filter"):
        read_changes(table, row_filter="id > 1", verify="strict")


@pytest.mark.parametrize(
    ("text", "column", "found"),
    [
        ("city = ", 8, "the end"),  # pyparsing itself says character 1 for both
        ("balance >> 3", 10, "'> 3'"),
        ("id = 1 and (region = 'eu' or region >", 38, "the end"),
        ("id = 1 region = 'eu'", 8, "\"region = 'eu'\""),
        ("id\t= = 1", 11, "'= 1'"),  # pyparsing counts in the tab-expanded text
    ],
)
def test_a_syntax_error_points_at_where_the_filter_stops(text: str, column: int, found: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_row_filter(text)
    message, shown, caret = str(refused.value).split("\n")
    assert f"it stops at character {column}, at {found};" in message, message
    assert shown == "  " + text.expandtabs() and caret == "  " + " " * (column - 1) + "^", (shown, caret)


def test_a_refused_like_pattern_keeps_its_own_reason() -> None:
    with pytest.raises(ConfigError, match="only supports wildcard, '%', at the end") as refused:
        parse_row_filter("region like 'e%u'")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--filter", "nosuch = 1"], "does not fit ns.t"),
        (["--filter", "id >"], "is not a pyiceberg expression: it stops at character 5, at the end"),
        (["--filter", "id > 1", "--verify", "strict"], "--verify strict checks whole snapshots"),
    ],
)
def test_the_cli_refuses_bad_filters_at_once(
    regions: tuple[LocalCatalog, Any], tmp_path: Path, flags: list[str], needle: str
) -> None:
    """One line (a syntax error adds a caret), exit 2, and no JVM started.

    A Java that counts its launches stands in for Java.
    """
    cat, _ = regions
    java = counting_java(tmp_path)
    done = run_icetail(
        ["changes", "--catalog", "rf", "--table", "ns.t", "--output", str(tmp_path / "o.parquet"), *flags],
        child_env([cat], extra={"JAVA_HOME": str(java.home)}),
    )
    assert done.returncode == 2, done.stderr
    lines = icetail_lines(done.stderr)
    assert needle in lines[0], done.stderr
    # one line, but for a syntax error: then the expression follows with a caret under where it stops
    assert lines[1:] == (["  id >", "      ^"] if "id >" in flags else []), done.stderr
    assert java.count() == 0  # refused before Spark was started


def test_plan_and_changes_take_the_filter(regions: tuple[LocalCatalog, Any], tmp_path: Path) -> None:
    cat, table = regions
    appends = table.metadata.snapshots[:3]
    env = child_env([cat])
    common = ["--catalog", "rf", "--table", "ns.t", "--to-snapshot", str(appends[-1].snapshot_id)]
    done = run_icetail(["plan", *common, "--filter", "id >= 10 and id < 20"], env)
    assert done.returncode == 0, done.stderr
    assert "2 data files left out by --filter" in done.stdout
    output = tmp_path / "eu.jsonl"
    done = run_icetail(["changes", *common, "--filter", "region = 'eu'", "--output", str(output)], env)
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted((r["_change_type"], r["id"], r["region"]) for r in written) == [
        ("INSERT", 1, "eu"),
        ("INSERT", 3, "eu"),
        ("INSERT", 20, "eu"),
    ]
