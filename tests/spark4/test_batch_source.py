"""spark.read.format('icetail') equals icetail.read_changes for the same range, on Spark 4."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import icetail
from tests.spark4.support import data_columns, load_df, row_counter
from tests.support.source_table import SourceTable

ACTIONS = ("append", "append", "delete", "upsert", "overwrite", "append", "evolve", "delete", "append")


@pytest.fixture
def history(source_table: SourceTable) -> SourceTable:
    for action in ACTIONS:
        source_table.commit(action)
    return source_table


def test_every_range_equals_read_changes(registered: Any, history: SourceTable) -> None:
    ids = history.snapshot_ids
    table = history.load()
    ranges = [(None, None), (None, ids[3]), (ids[1], ids[4]), (ids[4], ids[7]), (ids[5], None), (ids[-2], ids[-1])]
    for from_id, to_id in ranges:
        options = history.options()
        if from_id is not None:
            options["from-snapshot"] = str(from_id)
        if to_id is not None:
            options["to-snapshot"] = str(to_id)
        got = load_df(registered, options)
        expected = icetail.read_changes(table, from_id, to_id, spark=registered)
        assert got.column_names == expected.column_names, (from_id, to_id)
        assert got.num_rows == expected.num_rows > 0, (from_id, to_id)
        assert row_counter(got) == row_counter(expected), (from_id, to_id)


def test_with_schema_id_gives_each_rows_commit_schema(registered: Any, history: SourceTable) -> None:
    """Option `with-schema-id`: `_schema_id` as `read_changes(with_schema_id=True)` gives it."""
    table = history.load()
    got = load_df(registered, {**history.options(), "with-schema-id": "true"})
    expected = icetail.read_changes(table, with_schema_id=True, spark=registered)
    assert got.column_names == expected.column_names and got.column_names[-1] == "_schema_id"
    assert row_counter(got) == row_counter(expected)
    pairs = set(zip(got.column("_commit_snapshot_id").to_pylist(), got.column("_schema_id").to_pylist(), strict=True))
    assert pairs == {(s, table.metadata.snapshot_by_id(s).schema_id) for s, _ in pairs}
    assert len({schema_id for _, schema_id in pairs}) == 2  # the `evolve` action made a second schema
    assert "_schema_id" not in load_df(registered, history.options()).column_names


def test_identifier_columns_pair_updates(registered: Any, history: SourceTable) -> None:
    ids = history.snapshot_ids
    (upsert,) = dict(history.actions)["upsert"]  # one overwrite snapshot
    options = history.options(from_snapshot=ids[ids.index(upsert) - 1], to_snapshot=upsert)
    options["identifier-columns"] = "id"
    got = load_df(registered, options)
    expected = icetail.read_changes(history.load(), int(options["from-snapshot"]), upsert, identifier_columns=["id"])
    # the rewrite re-inserted every other row unchanged: carry-overs, removed
    assert Counter(got.column("_change_type").to_pylist()) == {"UPDATE_BEFORE": 2, "UPDATE_AFTER": 2}
    assert row_counter(got) == row_counter(expected)


def test_previous_rows_plus_changes_are_the_next_rows(registered: Any, history: SourceTable) -> None:
    table = history.load()
    ids = history.snapshot_ids
    changed = 0
    for parent, child in zip(ids, ids[1:], strict=False):
        changes = load_df(registered, history.options(from_snapshot=parent, to_snapshot=child))
        columns = data_columns(changes)
        kinds = changes.column("_change_type").to_pylist()
        changed += changes.num_rows
        per_row = list(zip(kinds, [tuple(r.values()) for r in changes.select(columns).to_pylist()], strict=True))
        removed = Counter(r for k, r in per_row if k in ("DELETE", "UPDATE_BEFORE"))
        added = Counter(r for k, r in per_row if k in ("INSERT", "UPDATE_AFTER"))
        before = _rows_at(table, parent, columns)
        after = _rows_at(table, child, columns)
        assert before - removed + added == after and not removed - before, (parent, child)
    assert changed > 0


def _rows_at(table: Any, snapshot_id: int, columns: list[str]) -> Counter[tuple[Any, ...]]:
    scanned = table.scan(snapshot_id=snapshot_id).to_arrow()
    present = [c for c in columns if c in scanned.column_names]
    rows = scanned.select(present).to_pylist()
    return Counter(tuple(row.get(c) for c in columns) for row in rows)


def test_empty_range_and_pinned_end(registered: Any, history: SourceTable) -> None:
    last = history.snapshot_ids[-1]
    assert load_df(registered, history.options(from_snapshot=last)).num_rows == 0
    frame = registered.read.format("icetail").options(**history.options()).load()
    history.commit("append")  # after load(): the DataFrame reads the snapshot current at load()
    assert set(frame.toArrow().column("_commit_snapshot_id").to_pylist()) <= set(history.snapshot_ids[:-1])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"from-snapshot": "abc"}, "option 'from-snapshot' must be a snapshot id (an integer), got 'abc'"),
        ({"starting-offsets": "x"}, "unknown option 'starting-offsets'"),
        ({"table": "nodot"}, "option 'table' 'nodot' must be written as NAMESPACE.TABLE"),
        ({"table": "ns.missing"}, "table 'ns.missing' does not exist in catalog"),
        ({"identifier-columns": "nope"}, "identifier column(s) nope not in the table schema"),
        ({"to-snapshot": "42"}, "to-snapshot snapshot 42 is not in the table metadata"),
        ({"with-schema-id": "yes"}, "option 'with-schema-id' must be true or false, got 'yes'"),
    ],
)
def test_bad_options_name_the_option(
    registered: Any, history: SourceTable, extra: dict[str, str], message: str
) -> None:
    options = {**history.options(), **extra}
    with pytest.raises(Exception) as raised:
        load_df(registered, options)
    assert message in str(raised.value)


def test_ordinals_match_the_changes_command(registered: Any, history: SourceTable, tmp_path: Path) -> None:
    """`_change_ordinal` (and every other column) as `icetail changes` writes it for the same range."""
    ids = history.snapshot_ids
    from_id, to_id = ids[2], ids[-1]
    output = tmp_path / "changes.parquet"
    env = {**os.environ, **{f"PYICEBERG_CATALOG__DSRC__{k.upper()}": v for k, v in history.properties.items()}}
    icetail_cli = str(Path(sys.executable).with_name("icetail"))
    command = [icetail_cli, "changes", "--catalog", "dsrc", "--table", "ns.t"]
    command += ["--from-snapshot", str(from_id), "--to-snapshot", str(to_id), "--output", str(output)]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    expected = pq.read_table(output)
    got = load_df(registered, history.options(from_snapshot=from_id, to_snapshot=to_id))
    assert sorted(set(got.column("_change_ordinal").to_pylist())) == list(range(len(ids) - 3))
    assert row_counter(got) == row_counter(expected)


def test_net_option_equals_read_changes_net(registered: Any, history: SourceTable) -> None:
    """option('net', 'true') reads the range's net changes (one task for the whole range), as the API does."""
    ids = history.snapshot_ids
    table = history.load()
    for from_id, identifiers in ((None, None), (ids[1], "id")):
        options = history.options()
        options["net"] = "true"
        if from_id is not None:
            options["from-snapshot"] = str(from_id)
        if identifiers:
            options["identifier-columns"] = identifiers
        got = load_df(registered, options)
        expected = icetail.read_changes(
            table, from_id, None, identifier_columns=[identifiers] if identifiers else None, net=True, spark=registered
        )
        every = icetail.read_changes(table, from_id, None, spark=registered)
        assert got.num_rows == expected.num_rows > 0 and got.num_rows < every.num_rows, from_id
        assert row_counter(got) == row_counter(expected), from_id
    options = history.options()
    options["net"] = "yes"
    with pytest.raises(Exception, match="option 'net' must be true or false"):
        load_df(registered, options)
