"""The Iceberg mirror sink against a real pyiceberg SQL catalog on SQLite: net changes by key, one
snapshot per group, replays skipped, pruning to the files that hold a key, refusals, conflicts.
The pipeline's side (Spark reading a real source) is in tests/pipeline/test_iceberg_mirror.py."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.base import ChunkKey
from icetail.sinks.iceberg.changelog import IcebergTableSink
from icetail.sinks.iceberg.history.sink import IcebergHistorySink
from icetail.sinks.iceberg.mirror import tasks as iceberg_mirror_tasks
from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink
from icetail.sinks.keyed.contract import GroupWriteSink, KeyedSink
from icetail.sinks.registry import open_sink
from icetail.sinks.urls import normalize_sink_url, parse_sink_url
from tests.sinks import CATALOG

URL = f"iceberg://{CATALOG}/tgt.m?mode=mirror"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.large_string()),
        pa.field("_change_type", pa.string(), nullable=False),
        pa.field("_change_ordinal", pa.int32(), nullable=False),
        pa.field("_commit_snapshot_id", pa.int64(), nullable=False),
        pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def _rows(changes: list[tuple[str, int, str | None, int]]) -> pa.Table:
    """(change type, id, v, ordinal) per row."""
    columns: dict[str, list[Any]] = {
        "id": [c[1] for c in changes],
        "v": [c[2] for c in changes],
        "_change_type": [c[0] for c in changes],
        "_change_ordinal": [c[3] for c in changes],
        "_commit_snapshot_id": [c[3] for c in changes],
        "_commit_timestamp": [0] * len(changes),
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in SCHEMA}, schema=SCHEMA)


def _key(batch: str, index: int) -> ChunkKey:
    return ChunkKey("c1", batch, index, f"s{index}", 0)


_SESSION: list[Any] = []  # the Spark session the sinks of a `tasks` run rewrite files with


@pytest.fixture(autouse=True, params=["driver", "tasks"])
def place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the files rewritten in the driver, and in Spark tasks (the threshold at 0)."""
    if request.param == "tasks":
        monkeypatch.setattr(iceberg_mirror_tasks, "DEFAULT_TASK_BYTES", 0)
        monkeypatch.setattr(f"{__name__}._SESSION", [request.getfixturevalue("spark")])
    return str(request.param)


def _open(key: tuple[str, ...] = ("id",), schema: pa.Schema = SCHEMA) -> IcebergMirrorSink:
    sink = open_sink(URL, consumer="c1")
    assert isinstance(sink, IcebergMirrorSink)
    if _SESSION:
        session = _SESSION[0]
        sink.use_spark(lambda: session)
    sink.bind(key, schema)
    return sink


def _target(catalog: SqlCatalog) -> dict[int, str | None]:
    rows = catalog.load_table("tgt.m").scan().to_arrow()
    ids, values = rows.column("id").to_pylist(), rows.column("v").to_pylist()
    assert len(set(ids)) == len(ids), f"a key twice in the target: {sorted(ids)}"
    return dict(zip(ids, values, strict=True))


def test_the_url_picks_the_mirror_and_keeps_the_changelog_forms(sql_catalog: SqlCatalog) -> None:
    assert parse_sink_url(URL).mode == "mirror"
    assert parse_sink_url(f"iceberg://{CATALOG}/tgt.m").mode is None
    assert normalize_sink_url(f"ICEBERG://{CATALOG}/tgt.m?mode=mirror") == URL
    assert normalize_sink_url(f"iceberg://{CATALOG}/tgt.m") == f"iceberg://{CATALOG}/tgt.m"
    changelog = open_sink(f"iceberg://{CATALOG}/tgt.c", consumer="c1")
    assert isinstance(changelog, IcebergTableSink) and not isinstance(changelog, KeyedSink)
    mirror = open_sink(URL, consumer="c1")
    assert isinstance(mirror, KeyedSink) and isinstance(mirror, GroupWriteSink)
    assert not hasattr(mirror, "stager"), "the mirror is written from the driver, never staged"
    assert parse_sink_url(f"iceberg://{CATALOG}/tgt.h?mode=history").mode == "history"
    assert normalize_sink_url(f"iceberg://{CATALOG}/tgt.h?mode=history") == f"iceberg://{CATALOG}/tgt.h?mode=history"
    history = open_sink(f"iceberg://{CATALOG}/tgt.h?mode=history", consumer="c1")
    assert isinstance(history, IcebergHistorySink) and isinstance(history, GroupWriteSink)
    with pytest.raises(Exception, match=r"\?mode=mirror or \?mode=history"):
        parse_sink_url(f"iceberg://{CATALOG}/tgt.m?mode=scd")


def test_changes_are_applied_by_key_in_commit_order_one_snapshot_per_group(sql_catalog: SqlCatalog) -> None:
    sink = _open()
    assert not sql_catalog.table_exists("tgt.m"), "created by the first group, from its rows' schema"
    sink.write_group([(_key("b1", 0), _rows([("INSERT", i, f"a{i}", 1) for i in range(10)]))])
    table = sql_catalog.load_table("tgt.m")
    assert [table.schema().find_column_name(i) for i in table.schema().identifier_field_ids] == ["id"]
    assert table.properties["commit.manifest-merge.enabled"] == "true", "a target the mirror creates merges"
    assert _target(sql_catalog) == {i: f"a{i}" for i in range(10)}
    group = [
        # an update, a key change (3 -> 30), a delete, a key deleted and re-inserted in one group
        (_key("b2", 0), _rows([("UPDATE_BEFORE", 1, "a1", 2), ("UPDATE_AFTER", 1, "u1", 2)])),
        (_key("b2", 1), _rows([("UPDATE_BEFORE", 3, "a3", 3), ("UPDATE_AFTER", 30, "k30", 3)])),
        (_key("b2", 2), _rows([("DELETE", 4, "a4", 4), ("DELETE", 5, "a5", 4)])),
        (_key("b2", 3), _rows([("INSERT", 5, "back5", 5), ("DELETE", 6, "a6", 5)])),
        # later in the stream, yet first in the chunk: commit order decides, not row order
        (_key("b2", 4), _rows([("INSERT", 6, "back6", 7), ("DELETE", 6, "gone", 6), ("INSERT", 6, "mid", 6)])),
    ]
    before = len(sql_catalog.load_table("tgt.m").snapshots())
    tokens = sink.write_group(group)
    table = sql_catalog.load_table("tgt.m")
    assert len(table.snapshots()) == before + 1 and len(set(tokens)) == 1
    assert table.current_snapshot() is not None and str(table.current_snapshot().snapshot_id) == tokens[0]
    expected = {i: f"a{i}" for i in range(10)} | {1: "u1", 30: "k30", 5: "back5", 6: "back6"}
    for gone in (3, 4):
        del expected[gone]
    assert _target(sql_catalog) == expected
    sink.close()


def test_a_replayed_group_is_skipped_whole_or_in_part(sql_catalog: SqlCatalog) -> None:
    sink = _open()
    group = [(_key("b1", i), _rows([("INSERT", i * 10 + j, "x", 1) for j in range(3)])) for i in range(3)]
    first = sink.write_group(group)
    snapshots = len(sql_catalog.load_table("tgt.m").snapshots())
    sink.close()
    again = _open()  # a new run after a crash: same chunks, cut differently
    assert again.write_group(group[:2]) == first[:2]
    assert again.write_group(group) == first
    assert len(sql_catalog.load_table("tgt.m").snapshots()) == snapshots and again.replayed == 5
    assert _target(sql_catalog) == {i * 10 + j: "x" for i in range(3) for j in range(3)}
    # a group that is partly new: the applied chunks left out, the rest applied once
    more = [*group, (_key("b1", 3), _rows([("UPDATE_BEFORE", 0, "x", 2), ("UPDATE_AFTER", 0, "y", 2)]))]
    tokens = again.write_group(more)
    assert tokens[:3] == first and tokens[3] != first[0]
    assert _target(sql_catalog)[0] == "y" and len(sql_catalog.load_table("tgt.m").snapshots()) == snapshots + 1


def test_only_files_that_can_hold_an_affected_key_are_read_and_rewritten(sql_catalog: SqlCatalog, place: str) -> None:
    sink = _open()
    for f in range(10):  # ten files of disjoint key ranges
        sink.write_group([(_key("b1", f), _rows([("INSERT", f * 100 + j, "a", 1) for j in range(50)]))])
    sink.write_group([(_key("b2", 0), _rows([("UPDATE_BEFORE", 305, "a", 2), ("UPDATE_AFTER", 305, "b", 2)]))])
    assert sink.last is not None and sink.last.files_read == 1 and len(sink.last.replaced) == 1
    assert sink.last.spark_tasks == (1 if place == "tasks" else 0)
    assert sink.last.rows_deleted == 1 and sink.last.rows_upserted == 1
    # more keys than pyiceberg evaluates in one IN (200): still pruned, to the two files they are in
    keys = [700 + j for j in range(50)] + [900 + j for j in range(50)] + list(range(5000, 5200))
    sink.write_group([(_key("b3", 0), _rows([("DELETE", k, "a", 3) for k in keys]))])
    assert sink.last.files_read == 2 and [len(new) for _, new in sink.last.replaced] == [0, 0]
    assert sink.last.spark_tasks == (2 if place == "tasks" else 0), "a task a file (2 cores x 2 a core)"
    target = _target(sql_catalog)
    assert len(target) == 400 and target[305] == "b" and 700 not in target


def test_a_group_of_many_keys_is_pruned_by_ranges(sql_catalog: SqlCatalog) -> None:
    """Over RANGE_OVER keys the filter is ranges of sorted keys (an IN's literals cost ~20 us each), in
    a balanced tree (a chain of 500 `Or`s overflowed pyiceberg's visitors: every file was read)."""
    sink = _open()
    for f in range(10):
        sink.write_group([(_key("b1", f), _rows([("INSERT", f * 1000 + j, "a", 1) for j in range(500)]))])
    changes = [("DELETE", 3000 + j, "a", 2) for j in range(500)]
    changes += [
        (t, 7000 + j, v, 2) for j in range(0, 500, 2) for t, v in (("UPDATE_BEFORE", "a"), ("UPDATE_AFTER", "b"))
    ]
    changes += [("INSERT", 100_000 + j, "n", 2) for j in range(100_000)]
    sink.write_group([(_key("b2", 0), _rows(changes))])
    assert sink.last is not None and sink.last.files_read == 2 and len(sink.last.replaced) == 2
    target = _target(sql_catalog)
    assert len(target) == 4500 + 100_000 and 3000 not in target and target[7000] == "b" and target[7001] == "a"


@pytest.mark.parametrize("merge", [False, True], ids=["carried", "merged"])
def test_manifests_do_not_pile_up_with_the_groups(sql_catalog: SqlCatalog, merge: bool) -> None:
    """pyiceberg's overwrite carries every manifest on, even one left with only DELETED entries: the
    mirror leaves those out (one live manifest a group), and with the target's manifest-merge
    properties merges the rest; the rows stay exact and each snapshot keeps its own deletes."""
    sink = _open()
    for f in range(4):
        sink.write_group([(_key("b1", f), _rows([("INSERT", f * 100 + j, "a", 1) for j in range(50)]))])
    with sql_catalog.load_table("tgt.m").transaction() as tx:  # the mirror created it with merges on
        tx.set_properties(
            {"commit.manifest-merge.enabled": str(merge).lower(), "commit.manifest.min-count-to-merge": "3"}
        )
    sink.close()
    sink = _open()
    for g in range(20):
        k = (g % 4) * 100 + g
        sink.write_group(
            [(_key("b2", g), _rows([("UPDATE_BEFORE", k, "a", 2 + g), ("UPDATE_AFTER", k, f"u{g}", 2 + g)]))]
        )
    table = sql_catalog.load_table("tgt.m")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    assert all(m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == snapshot.snapshot_id
               for m in manifests), "a manifest of only earlier deletes was carried on"  # fmt: skip
    assert any(m.deleted_files_count for m in manifests), "the snapshot's own deletes are in its manifests"
    assert len(manifests) <= (6 if merge else 4 + 20 + 1), len(manifests)
    target = _target(sql_catalog)
    assert len(target) == 200 and all(target[(g % 4) * 100 + g] == f"u{g}" for g in range(20))


def test_an_existing_target_that_does_not_match_is_refused_in_one_line(sql_catalog: SqlCatalog) -> None:
    sql_catalog.create_namespace("tgt")
    sql_catalog.create_table(
        "tgt.m",
        Schema(
            NestedField(1, "id", StringType(), required=True),
            NestedField(2, "v", StringType(), required=False),
            identifier_field_ids=[1],
        ),
    )
    with pytest.raises(SinkRejectedError) as info:
        _open()
    assert "column id is string, the source's is long" in str(info.value) and "\n" not in str(info.value)
    sql_catalog.drop_table("tgt.m")
    sql_catalog.create_table(
        "tgt.m", Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
    )
    with pytest.raises(SinkRejectedError, match="identifier fields are none, the mirror's key is id"):
        _open()
    sql_catalog.drop_table("tgt.m")
    sql_catalog.create_table(  # a matching table is adopted as it is
        "tgt.m",
        Schema(
            NestedField(7, "id", LongType(), required=True), NestedField(8, "v", StringType()), identifier_field_ids=[7]
        ),
    )
    sink = _open()
    sink.write(_key("b1", 0), _rows([("INSERT", 1, "a", 1)]))
    assert _target(sql_catalog) == {1: "a"}


def test_another_writers_commit_is_retried_on_the_new_table(sql_catalog: SqlCatalog) -> None:
    sink = _open()
    sink.write(_key("b1", 0), _rows([("INSERT", i, "a", 1) for i in range(5)]))
    other = sql_catalog.load_table("tgt.m")  # commits behind the sink's held metadata
    other.append(pa.table({"id": pa.array([100], pa.int64()), "v": ["other"]}, schema=other.schema().as_arrow()))
    sink.write(_key("b2", 0), _rows([("UPDATE_BEFORE", 2, "a", 2), ("UPDATE_AFTER", 2, "b", 2)]))
    assert _target(sql_catalog) == {0: "a", 1: "a", 2: "b", 3: "a", 4: "a", 100: "other"}


def test_a_composite_key(sql_catalog: SqlCatalog) -> None:
    schema = pa.schema([pa.field("k2", pa.large_string(), nullable=False), *SCHEMA])
    sink = _open(("id", "k2"), schema)

    def rows(changes: list[tuple[str, int, str, str, int]]) -> pa.Table:
        base = _rows([(t, i, v, o) for t, i, _, v, o in changes])
        return base.add_column(0, schema.field("k2"), pa.array([c[2] for c in changes], pa.large_string()))

    inserts = [("INSERT", 1, "x", "a", 1), ("INSERT", 1, "y", "b", 1), ("INSERT", 2, "x", "c", 1)]
    sink.write(_key("b1", 0), rows(inserts))
    sink.write(_key("b2", 0), rows([("UPDATE_BEFORE", 1, "x", "a", 2), ("UPDATE_AFTER", 1, "y", "z", 2)]))
    got = sql_catalog.load_table("tgt.m").scan().to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["k2"].to_pylist(), got["v"].to_pylist(), strict=True)) == [
        (1, "y", "z"),
        (2, "x", "c"),
    ]


def test_a_partitioned_target_reads_only_the_partitions_of_the_keys(sql_catalog: SqlCatalog) -> None:
    """Keyed by (region, id), partitioned by region: an id is in every partition, a key in one.
    (A bucket(N, key) target is written alike, with pyiceberg-core installed; this venv has none.)"""
    sql_catalog.create_namespace("tgt")
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="region"))
    keyed = Schema(
        NestedField(1, "region", StringType(), required=True),
        NestedField(2, "id", LongType(), required=True),
        NestedField(3, "v", StringType()),
        identifier_field_ids=[1, 2],
    )
    sql_catalog.create_table("tgt.m", keyed, partition_spec=spec)
    schema = pa.schema([pa.field("region", pa.large_string(), nullable=False), *SCHEMA])
    sink = _open(("region", "id"), schema)
    regions = ["eu", "us", "ap", "af"]

    def rows(changes: list[tuple[str, str, int, str, int]]) -> pa.Table:
        base = _rows([(t, i, v, o) for t, _, i, v, o in changes])
        return base.add_column(0, schema.field("region"), pa.array([c[1] for c in changes], pa.large_string()))

    sink.write(_key("b1", 0), rows([("INSERT", r, i, "a", 1) for r in regions for i in range(250)]))
    assert len(sql_catalog.load_table("tgt.m").inspect.files()) == 4
    sink.write(_key("b2", 0), rows([("UPDATE_BEFORE", "eu", 5, "a", 2), ("UPDATE_AFTER", "eu", 5, "b", 2)]))
    assert sink.last is not None and sink.last.files_read == 1 and len(sink.last.replaced) == 1
    got = sql_catalog.load_table("tgt.m").scan().to_arrow()
    changed = sorted(zip(got["region"].to_pylist(), got["id"].to_pylist(), got["v"].to_pylist(), strict=True))
    assert len(changed) == 1000 and [r for r in changed if r[2] != "a"] == [("eu", 5, "b")]


def _with_ids(columns: list[tuple[str, pa.DataType, int]]) -> pa.Schema:
    """A change-row schema whose data columns carry source field ids (name, type, id), then icetail's."""
    data = [pa.field(n, t, nullable=n != "id", metadata={b"PARQUET:field_id": str(i).encode()}) for n, t, i in columns]
    return pa.schema([*data, *[f for f in SCHEMA if f.name.startswith("_")]])


def _evolved_rows(schema: pa.Schema, changes: list[tuple[str, int, dict[str, Any], int]]) -> pa.Table:
    """(change type, key, other data columns by name, ordinal) per row, in `schema` (its key column first)."""
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    for change_type, key, values, ordinal in changes:
        for f in schema:
            fixed = {schema.names[0]: key, "_change_type": change_type, "_change_ordinal": ordinal}
            fixed |= {"_commit_snapshot_id": ordinal, "_commit_timestamp": 0}
            columns[f.name].append(fixed[f.name] if f.name in fixed else values.get(f.name))
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema)


def test_the_target_follows_the_source_schema_by_field_id(sql_catalog: SqlCatalog) -> None:
    """Added, renamed (the key too), widened, dropped: by source field id, before the group's commit,
    and a replay of the group changes nothing; a column added under a dropped one's name is new."""
    v1 = _with_ids([("id", pa.int64(), 1), ("n", pa.int32(), 2), ("v", pa.large_string(), 3)])
    sink = _open(schema=v1)
    sink.write(_key("b1", 0), _evolved_rows(v1, [("INSERT", i, {"n": i, "v": f"a{i}"}, 1) for i in range(4)]))
    v2 = _with_ids([("id", pa.int64(), 1), ("n", pa.int32(), 2), ("w", pa.large_string(), 3), ("e", pa.int64(), 4)])
    group = [(_key("b2", 0), _evolved_rows(v2, [("INSERT", 9, {"n": 9, "w": "new", "e": 90}, 2)]))]
    sink.write_group(group)
    v3 = _with_ids([("key", pa.int64(), 1), ("n", pa.int64(), 2), ("e", pa.int64(), 4), ("v", pa.large_string(), 5)])
    rows = _evolved_rows(
        v3,
        [
            ("INSERT", 10, {"n": 6_000_000_000, "v": "nv"}, 3),
            ("UPDATE_BEFORE", 1, {"n": 1, "e": None}, 3),
            ("UPDATE_AFTER", 1, {"n": 5_000_000_000, "e": 1}, 3),
        ],
    )
    sink.write_group([(_key("b3", 0), rows)])
    table = sql_catalog.load_table("tgt.m")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("key", "long"),
        ("n", "long"),
        ("e", "long"),
        ("v", "string"),
    ]
    assert [table.schema().find_column_name(i) for i in table.schema().identifier_field_ids] == ["key"]
    got = table.scan().to_arrow()
    assert sorted(zip(*(got[c].to_pylist() for c in ("key", "n", "e", "v")), strict=True)) == [
        (0, 0, None, None),
        (1, 5_000_000_000, 1, None),
        (2, 2, None, None),
        (3, 3, None, None),
        (9, 9, 90, None),
        (10, 6_000_000_000, None, "nv"),
    ], "the dropped w's values are gone; the new v (source field 5) is not the old v"
    schemas, snapshots = len(table.schemas()), len(table.snapshots())
    sink.close()
    again = _open(("key",), v3)  # a new run replays group b2 (of schema v2): skipped, nothing changes
    assert again.write_group(group) == [str(table.snapshots()[1].snapshot_id)]
    table = sql_catalog.load_table("tgt.m")
    assert (len(table.schemas()), len(table.snapshots())) == (schemas, snapshots) and again.replayed == 1
