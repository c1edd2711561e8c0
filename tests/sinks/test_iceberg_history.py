"""The Iceberg history's per-file change (`CloseOpenVersions`, rows in -> rows out) on Arrow tables."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from icetail.sinks.base import ChunkKey
from icetail.sinks.iceberg.history.apply import CloseOpenVersions, closes_of
from icetail.sinks.iceberg.history.sink import IcebergHistorySink
from icetail.sinks.keyed.history_versions import version_changes
from icetail.sinks.registry import open_sink
from tests.sinks import CATALOG
from tests.sinks.test_iceberg_mirror import SCHEMA
from tests.sinks.test_iceberg_mirror import _rows as _changes
from tests.sinks.test_pg_mirror_history import INS, UA, UB, D, _rows

TS = pa.timestamp("us", tz="UTC")
FILE = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("v", pa.large_string()),
        pa.field("_valid_from_snapshot_id", pa.int64(), False),
        pa.field("_valid_to_snapshot_id", pa.int64()),
        pa.field("_valid_from", TS),
        pa.field("_valid_to", TS),
    ]
)


def _file(*versions: tuple[int, str, int, int | None]) -> pa.Table:
    """(id, v, from snapshot number, to snapshot number): snapshot n is id 100 + n at n seconds."""
    ids, values, froms, tos = zip(*versions, strict=True)
    return pa.table(
        [
            ids,
            values,
            [100 + f for f in froms],
            [None if t is None else 100 + t for t in tos],
            [f * 1_000_000 for f in froms],
            [None if t is None else t * 1_000_000 for t in tos],
        ],
        schema=FILE,
    )


def _summary(rows: pa.Table) -> list[tuple[Any, ...]]:
    cols = ["id", "v", "_valid_from_snapshot_id", "_valid_to_snapshot_id", "_valid_to"]
    return sorted(zip(*(rows.column(c).to_pylist() for c in cols), strict=True), key=repr)


def test_a_file_s_open_versions_of_the_group_s_keys_are_closed_and_nothing_else_changes() -> None:
    changes = version_changes(
        _rows((1, "a", UB, 5), (1, "a5", UA, 5), (2, "b", D, 6), (7, "new", INS, 6), (3, "c", INS, 7)), ("id",)
    )
    transform = CloseOpenVersions(closes_of(changes, ("id",)), ("id",))
    rows = _file((1, "a0", 1, 3), (1, "a", 3, None), (2, "b", 2, None), (4, "d", 1, None), (3, "c", 7, None))
    out = transform(rows)
    at = lambda n: datetime.fromtimestamp(n, UTC)  # noqa: E731
    assert _summary(out.rows) == [
        (1, "a", 103, 105, at(5)),  # closed where the group's first snapshot of the key is
        (1, "a0", 101, 103, at(3)),  # closed already: untouched
        (2, "b", 102, 106, at(6)),  # deleted: closed, no version added (that is the appended rows' job)
        (4, "d", 101, None, None),  # not a key of the group
    ], "3's open version was made by the group's own first snapshot of it: replaced (left out)"
    assert (out.closed, out.replaced, out.duplicates, out.changed) == (2, 1, 1, True)
    assert out.rows.schema == rows.schema
    untouched = transform(_file((4, "d", 1, None), (1, "a", 3, 4)))
    assert not untouched.changed and untouched.rows.num_rows == 2
    again = pickle.loads(pickle.dumps(transform))  # plain data: a Spark task can run it
    assert _summary(again(rows).rows) == _summary(out.rows)


def test_files_of_closed_versions_only_are_pruned_and_a_replayed_group_is_left_out(sql_catalog: SqlCatalog) -> None:
    """A group reads only the files that can hold an open version of its keys: a file whose
    versions are all closed (no null `_valid_to_snapshot_id`) is pruned by its metrics."""
    sink = open_sink(f"iceberg://{CATALOG}/tgt.h?mode=history", consumer="c1")
    assert isinstance(sink, IcebergHistorySink)
    sink.bind(("id",), SCHEMA)
    key = lambda b: ChunkKey("c1", b, 0, "s0", 0)  # noqa: E731
    sink.write_group([(key("b1"), _changes([("INSERT", i, f"a{i}", 1) for i in range(100)]))])
    updates = [(t, i, f"u{i}", 2) for i in range(100) for t in ("UPDATE_BEFORE", "UPDATE_AFTER")]
    sink.write_group([(key("b2"), _changes(updates))])  # file 1 rewritten, every version in it closed
    assert sink.last is not None and (sink.last.files_read, len(sink.last.replaced)) == (1, 1)
    sink.write_group([(key("b3"), _changes([("UPDATE_BEFORE", 5, "u5", 3), ("UPDATE_AFTER", 5, "w5", 3)]))])
    assert sink.last is not None and (sink.last.files_read, len(sink.last.replaced)) == (1, 1), "closed-only pruned"
    snapshots = len(sql_catalog.load_table("tgt.h").snapshots())
    sink.write_group([(key("b3"), _changes([("UPDATE_BEFORE", 5, "u5", 3), ("UPDATE_AFTER", 5, "w5", 3)]))])
    assert sink.replayed == 1 and len(sql_catalog.load_table("tgt.h").snapshots()) == snapshots
    sink.close()
    rows = sql_catalog.load_table("tgt.h").scan().to_arrow().to_pylist()
    assert len(rows) == 201 and sorted(r["v"] for r in rows if r["id"] == 5) == ["a5", "u5", "w5"]
    assert [r["v"] for r in rows if r["_valid_to_snapshot_id"] is None and r["id"] in (5, 6)] in (
        ["w5", "u6"],
        ["u6", "w5"],
    )
