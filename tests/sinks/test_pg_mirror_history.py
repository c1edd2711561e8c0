"""History (mode=history): versions per key and snapshot, on Arrow tables and in a real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icetail.sinks.base import ChunkKey
from icetail.sinks.keyed.history_versions import version_changes
from icetail.sinks.registry import open_sink
from tests.support.pg_mirror import mirror_url, query

INS, D, UB, UA = "INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False, metadata={b"PARQUET:field_id": b"1"}),
        pa.field("v", pa.large_string(), metadata={b"PARQUET:field_id": b"2"}),
        pa.field("_change_type", pa.string(), False),
        pa.field("_change_ordinal", pa.int32(), False),
        pa.field("_commit_snapshot_id", pa.int64(), False),
        pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), False),
    ]
)


def _rows(*changes: tuple[int, str, str, int]) -> pa.Table:
    """(id, v, change type, snapshot number): snapshot n has id 100 + n, ordinal n, commit time n s."""
    ids, values, types, snaps = zip(*changes, strict=True)
    return pa.table(
        [ids, values, types, snaps, [100 + s for s in snaps], [s * 1_000_000 for s in snaps]], schema=SCHEMA
    )


def _summary(rows: pa.Table) -> list[tuple[Any, ...]]:
    changes = version_changes(rows, ("id",))
    t = changes.rows
    cols = ["id", "v", "_valid_from_snapshot_id", "_valid_to_snapshot_id"]
    return sorted(zip(changes.ops.to_pylist(), *(t.column(c).to_pylist() for c in cols), strict=True), key=repr)


def test_three_snapshots_of_one_chunk_make_three_versions() -> None:
    got = _summary(_rows((1, "a", INS, 1), (1, "a", UB, 2), (1, "b", UA, 2), (1, "b", UB, 3), (1, "c", UA, 3)))
    assert got == sorted(
        [("V", 1, "a", 101, 102), ("V", 1, "b", 102, 103), ("V", 1, "c", 103, None), ("F", 1, "a", 101, 102)],
        key=repr,
    )


def test_a_delete_adds_no_version_and_closes_the_open_one() -> None:
    got = _summary(_rows((1, "a", D, 4), (2, "x", UB, 4), (3, "x", UA, 4)))  # 2 -> 3: the key changed
    assert got == sorted([("C", 1, "a", 104, None), ("C", 2, "x", 104, None), ("V", 3, "x", 104, None),
                          ("F", 3, "x", 104, None)], key=repr)  # fmt: skip


def test_duplicate_inserts_are_counted() -> None:
    assert version_changes(_rows((1, "a", INS, 1), (1, "b", INS, 2)), ("id",)).duplicates == 1


def _versions(schema: str) -> list[tuple[Any, ...]]:
    return query(
        f"SELECT id, v, _valid_from_snapshot_id, _valid_to_snapshot_id, extract(epoch FROM _valid_from)::int, "
        f'extract(epoch FROM _valid_to)::int FROM "{schema}".t ORDER BY id, _valid_from_snapshot_id'
    )


def test_history_table_holds_every_version(pg_schema: str) -> None:
    sink = open_sink(mirror_url(pg_schema, extra="&mode=history"), consumer="c1")
    sink.bind(("id",), SCHEMA)  # type: ignore[attr-defined]
    key = lambda i: ChunkKey("c1", "b1", i, f"s{i}", 0)  # noqa: E731
    sink.write(key(0), _rows((1, "a", INS, 1), (2, "b", INS, 1)))
    sink.write(key(1), _rows((1, "a", UB, 2), (1, "a2", UA, 2), (2, "b", D, 2), (1, "a2", UB, 3), (1, "a3", UA, 3)))
    sink.write(key(1), _rows((9, "replayed", INS, 3)))  # a replay: skipped by the ledger
    sink.write(key(2), _rows((2, "b again", INS, 4)))
    sink.close()
    assert _versions(pg_schema) == [
        (1, "a", 101, 102, 1, 2),
        (1, "a2", 102, 103, 2, 3),
        (1, "a3", 103, None, 3, None),
        (2, "b", 101, 102, 1, 2),
        (2, "b again", 104, None, 4, None),
    ]
    primary_key = query(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY a.attnum",
        (f'"{pg_schema}".t',),
    )
    assert primary_key == [("id",), ("_valid_from_snapshot_id",)]


def test_history_keeps_a_dropped_column(pg_schema: str) -> None:
    sink = open_sink(mirror_url(pg_schema, extra="&mode=history"), consumer="c1")
    sink.bind(("id",), SCHEMA)  # type: ignore[attr-defined]
    sink.write(ChunkKey("c1", "b1", 0, "s0", 0), _rows((1, "a", INS, 1)))
    without_v = SCHEMA.remove(1)
    rows = pa.table([[1, 1], [UB, UA], [2, 2], [102, 102], [2_000_000] * 2], schema=without_v)
    sink.write(ChunkKey("c1", "b2", 0, "s0", 0), rows)
    sink.close()
    assert _versions(pg_schema) == [(1, "a", 101, 102, 1, 2), (1, None, 102, None, 2, None)]
