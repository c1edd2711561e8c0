"""Updates written by pyiceberg's `upsert` and `overwrite` (issue 33, item 7; docs/semantics.md).

pyiceberg commits a transaction's delete and its inserts as separate snapshots (an overwrite
that rewrites the files, then an append per insert), published by one catalog commit. Per
snapshot there is then no DELETE and INSERT of one key to pair: the plain stream (and its
Debezium form) shows a delete then a create, and `--net` over a range holding the whole
transaction shows the update pair. A snapshot records nothing that ties it to the others of its
transaction; only the table's metadata log shows which snapshots one catalog commit added.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.processes import child_env, run_icetail

ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    identifier_field_ids=[1],
)


@pytest.fixture
def written(tmp_path: Path) -> tuple[LocalCatalog, Any]:
    """An append of ids 1-3, an upsert (2 changed, 4 new), an overwrite of id 3: each one transaction."""
    cat = new_catalog(tmp_path / "cat", "pyw")
    cat.catalog().create_namespace("ns")
    table = cat.catalog().create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, ARROW))
    result = table.upsert(pa.table({"id": [2, 4], "v": ["B", "d"]}, ARROW))
    assert (result.rows_updated, result.rows_inserted) == (1, 1)
    table.overwrite(pa.table({"id": [3], "v": ["C"]}, ARROW), overwrite_filter=EqualTo("id", 3))
    return cat, cat.load("ns.t")


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_transaction_is_several_snapshots_that_record_no_tie(written: tuple[LocalCatalog, Any]) -> None:
    _, table = written
    snapshots = table.metadata.snapshots
    assert [s.summary.operation.value for s in snapshots] == [
        "append",
        "overwrite",  # upsert: id 2's file rewritten without it
        "append",  # upsert: (2, 'B')
        "append",  # upsert: (4, 'd')
        "overwrite",  # overwrite: id 3's file rewritten without it
        "append",  # overwrite: (3, 'C')
    ]
    # a snapshot's own record: its parent, sequence number, time, summary; nothing names its transaction
    # (its summary holds the operation and row and file counts only)
    for snapshot in snapshots:
        counts = snapshot.summary.additional_properties
        assert all(k.startswith(("added-", "deleted-", "removed-", "total-", "changed-")) for k in counts), counts
    # what ties them is only which metadata file first listed them: one catalog commit per transaction
    first_listed: dict[int, int] = {}
    for version, entry in enumerate(table.metadata.metadata_log):
        listed = json.loads(Path(entry.metadata_file.removeprefix("file://")).read_text())
        for snapshot in listed.get("snapshots", []):
            first_listed.setdefault(snapshot["snapshot-id"], version)
    last = len(table.metadata.metadata_log)
    commits = [first_listed.get(s.snapshot_id, last) for s in snapshots]
    assert commits[1] == commits[2] == commits[3] and commits[4] == commits[5] and len(set(commits)) == 3


def test_the_plain_stream_shows_a_delete_then_a_create_and_net_the_update(
    written: tuple[LocalCatalog, Any], tmp_path: Path
) -> None:
    cat, table = written
    env = child_env([cat])
    appended = str(table.metadata.snapshots[0].snapshot_id)
    common = ["changes", "--catalog", "pyw", "--table", "ns.t", "--from-snapshot", appended]

    debezium = tmp_path / "debezium.jsonl"
    done = run_icetail([*common, "--format", "debezium", "--output", str(debezium)], env)
    assert done.returncode == 0, done.stderr
    assert [(r["op"], r["before"], r["after"]) for r in _rows(debezium)] == [
        ("d", {"id": 2, "v": "b"}, None),
        ("c", None, {"id": 2, "v": "B"}),
        ("c", None, {"id": 4, "v": "d"}),
        ("d", {"id": 3, "v": "c"}, None),
        ("c", None, {"id": 3, "v": "C"}),
    ]

    net = tmp_path / "net.jsonl"
    done = run_icetail([*common, "--net", "--output", str(net)], env)
    assert done.returncode == 0, done.stderr
    assert [(r["_change_type"], r["id"], r["v"]) for r in _rows(net)] == [
        ("UPDATE_BEFORE", 2, "b"),
        ("UPDATE_AFTER", 2, "B"),
        ("INSERT", 4, "d"),
        ("UPDATE_BEFORE", 3, "c"),
        ("UPDATE_AFTER", 3, "C"),
    ]


def test_a_net_consumer_pairs_an_update_when_its_batch_holds_the_whole_transaction(
    written: tuple[LocalCatalog, Any], tmp_path: Path
) -> None:
    """Batches of 3 snapshots: the upsert's three, then the overwrite's two, each netted."""
    cat, table = written
    appended = table.metadata.snapshots[0].snapshot_id
    sink = tmp_path / "sink.jsonl"
    done = run_icetail(
        [
            "run",
            "--catalog",
            "pyw",
            "--table",
            "ns.t",
            "--state",
            f"sqlite:///{tmp_path}/state.db",
            "--sink",
            f"jsonl://{sink}",
            "--start",
            f"snapshot:{appended}",
            "--net",
            "--max-snapshots-per-batch",
            "3",
        ],
        child_env([cat]),
    )
    assert done.returncode == 0, done.stderr
    assert [(r["_change_type"], r["id"], r["v"]) for r in _rows(sink)] == [
        ("UPDATE_BEFORE", 2, "b"),
        ("UPDATE_AFTER", 2, "B"),
        ("INSERT", 4, "d"),
        ("UPDATE_BEFORE", 3, "c"),
        ("UPDATE_AFTER", 3, "C"),
    ]
