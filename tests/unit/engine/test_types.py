"""Every Iceberg type, at any nesting, without the JVM reference: projection, row identity, keys, output.

The Java-written differential workload (tests/differential/test_nested_types.py) proves the change
rows; these tests pin the pieces it relies on, with NULLs at every level and sliced arrays (a
chunk is a slice of a row group), and the types Spark 3.5 cannot write (uuid, fixed, time).
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import time
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FixedType,
    GeometryType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimeType,
    UUIDType,
)

from icetail.kernel.errors import MetadataError
from icetail.monitor.cli.main import main
from icetail.reader.split.equality import row_codes
from icetail.reader.split.projection import (
    check_readable,
    columns_to_read,
    key_columns,
    key_field,
    project,
    struct_path,
)
from icetail.sinks.files.jsonl_encoding import encode_jsonl

# file schema: struct s {a int, b string, m map<string, list<int>>}, list<struct<x int>>, map<string, struct<q double>>
FILE_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(
        2,
        "s",
        StructType(
            NestedField(10, "a", IntegerType(), required=False),
            NestedField(11, "b", StringType(), required=False),
            NestedField(
                12, "m", MapType(13, StringType(), 14, ListType(15, IntegerType(), element_required=False),
                                 value_required=False), required=False
            ),
        ),
        required=False,
    ),
    NestedField(3, "ls", ListType(16, StructType(NestedField(17, "x", IntegerType(), required=False)),
                                  element_required=False), required=False),
    NestedField(4, "mp", MapType(18, StringType(), 19, StructType(NestedField(20, "q", DoubleType(), required=False)),
                                 value_required=False), required=False),
    NestedField(5, "arr", ListType(21, IntegerType(), element_required=False), required=False),
)

# the table after evolution: s.b renamed to bb, s.c added, ls.element.y added, arr's element widened
TABLE_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(
        2,
        "s",
        StructType(
            NestedField(10, "a", IntegerType(), required=False),
            NestedField(11, "bb", StringType(), required=False),
            NestedField(
                12, "m", MapType(13, StringType(), 14, ListType(15, IntegerType(), element_required=False),
                                 value_required=False), required=False
            ),
            NestedField(30, "c", LongType(), required=False),
        ),
        required=False,
    ),
    NestedField(3, "ls", ListType(16, StructType(NestedField(17, "x", IntegerType(), required=False),
                                                 NestedField(31, "y", StringType(), required=False)),
                                  element_required=False), required=False),
    NestedField(4, "mp", MapType(18, StringType(), 19, StructType(NestedField(20, "q", DoubleType(), required=False)),
                                 value_required=False), required=False),
    NestedField(5, "arr", ListType(21, LongType(), element_required=False), required=False),
)

ROWS = [
    {"id": 0, "s": {"a": 9, "b": "skip", "m": None}, "ls": None, "mp": None, "arr": None},  # sliced away
    {"id": 1, "s": {"a": 1, "b": "x", "m": [("k", [1, None]), ("n", None)]}, "ls": [{"x": 1}, None],
     "mp": [("a", {"q": 1.5}), ("b", None)], "arr": [1, None]},
    {"id": 2, "s": None, "ls": None, "mp": None, "arr": None},
    {"id": 3, "s": {"a": None, "b": None, "m": []}, "ls": [], "mp": [], "arr": []},
    {"id": 4, "s": {"a": 4, "b": "y", "m": None}, "ls": [None], "mp": [("c", {"q": float("nan")})], "arr": [4]},
]


def _file_batch() -> pa.RecordBatch:
    batch = pa.RecordBatch.from_pylist(ROWS, schema=schema_to_pyarrow(FILE_SCHEMA))
    return batch.slice(1)  # offsets of nested children no longer start at 0


def test_projection_matches_ids_at_every_depth_and_keeps_nulls() -> None:
    out = project(_file_batch(), FILE_SCHEMA, TABLE_SCHEMA, format_version=2).to_pylist()
    assert [r["id"] for r in out] == [1, 2, 3, 4]
    first, null_row, empty_row, last = out
    assert first["s"] == {"a": 1, "bb": "x", "m": [("k", [1, None]), ("n", None)], "c": None}
    assert first["ls"] == [{"x": 1, "y": None}, None]
    assert first["mp"] == [("a", {"q": 1.5}), ("b", None)]
    assert first["arr"] == [1, None]
    # NULL collections stay NULL, empty ones stay empty, at every level
    assert null_row == {"id": 2, "s": None, "ls": None, "mp": None, "arr": None}
    assert empty_row == {"id": 3, "s": {"a": None, "bb": None, "m": [], "c": None}, "ls": [], "mp": [], "arr": []}
    assert last["ls"] == [None] and math.isnan(last["mp"][0][1]["q"])
    projected = project(_file_batch(), FILE_SCHEMA, TABLE_SCHEMA, format_version=2)
    assert projected.schema.field("arr").type.value_type == pa.int64()  # widened element


def test_columns_to_read_selects_whole_nested_columns() -> None:
    assert columns_to_read(FILE_SCHEMA, {15}) == ["s"]  # an element of a list inside a map inside a struct
    assert columns_to_read(FILE_SCHEMA, {1, 17, 21}) == ["id", "ls", "arr"]
    assert columns_to_read(FILE_SCHEMA, {999}) == []


def test_row_codes_compare_nested_values_as_values() -> None:
    mtype = pa.map_(pa.string(), pa.int64())
    table = pa.table({
        "m": pa.array([[("a", 1), ("b", 2)], [("b", 2), ("a", 1)], None, []], mtype),  # maps have no order
        "l": pa.array([[1.0, math.nan], [1.0, math.nan], None, []], pa.list_(pa.float64())),
        "s": pa.array([{"x": None}, {"x": None}, None, {"x": None}], pa.struct([("x", pa.int32())])),
    })
    codes = row_codes(table)
    assert codes[0] == codes[1]  # same map in another order, NaN = NaN inside a list
    assert len({int(c) for c in codes}) == 3  # NULL list/map/struct differ from empty ones and from {x: NULL}
    sliced = row_codes(table.slice(1))
    assert sliced[1] != sliced[2] and sliced[0] != sliced[1]
    nested = pa.table({"m": pa.array([[("k", [1])], [("k", [2])], [("k", [1])]], pa.map_(pa.string(),
                                                                                        pa.list_(pa.int64())))})
    assert list(row_codes(nested)) == [0, 1, 0]


def test_key_columns_tell_a_null_struct_from_a_null_key() -> None:
    keys = key_columns(_file_batch(), FILE_SCHEMA, [key_field(struct_path(FILE_SCHEMA, 10) or ())])
    assert keys.column_names == ["10@0", "10"]
    assert keys.column("10").to_pylist() == [1, None, None, 4]
    assert keys.column("10@0").to_pylist() == [True, False, True, True]  # row 2: NULL struct; row 3: NULL key


def test_equality_keys_inside_lists_or_maps_are_refused() -> None:
    assert [f.name for f in struct_path(FILE_SCHEMA, 10) or ()] == ["s", "a"]
    assert struct_path(FILE_SCHEMA, 999) is None
    for field_id in (15, 17, 20):  # list element in a map, a list's struct, a map value's struct
        with pytest.raises(MetadataError, match=f"field id {field_id} .*inside a list or map"):
            struct_path(FILE_SCHEMA, field_id)


def test_geometry_columns_are_refused_by_name() -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "s", StructType(NestedField(3, "g", GeometryType(), required=False)),
                                required=False))
    with pytest.raises(MetadataError, match=r"column s\.g has type geometry"):
        check_readable(schema, "ns.t")
    check_readable(FILE_SCHEMA, "ns.t")


def test_jsonl_encodes_nested_and_uncommon_values_as_strict_json() -> None:
    schema = pa.schema([
        ("s", pa.struct([("d", pa.decimal128(38, 10)), ("b", pa.binary())])),
        ("m", pa.map_(pa.string(), pa.list_(pa.float64()))),
        ("u", pa.uuid()),
        ("t", pa.time64("us")),
    ])
    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    batch = pa.RecordBatch.from_pylist([
        {"s": {"d": Decimal("1.5"), "b": b"\x00\x01"}, "m": [("k", [math.nan, 1.0])], "u": value.bytes,
         "t": time(1, 2, 3, 4)},
        {"s": None, "m": None, "u": None, "t": None},
    ], schema=schema)
    first, second = (json.loads(line) for line in encode_jsonl(batch).split(b"\n")[:-1])
    assert first == {"s": {"d": "1.5000000000", "b": "AAE="}, "m": {"k": ["NaN", 1.0]},
                     "u": str(value), "t": "01:02:03.000004"}
    assert second == {"s": None, "m": None, "u": None, "t": None}


@pytest.fixture
def uncommon_table(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> SqlCatalog:
    """A pyiceberg-written v2 table with uuid, fixed, time and decimal(38) columns (Spark cannot write them)."""
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    props = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{warehouse}"}
    monkeypatch.setenv("PYICEBERG_CATALOG__TYPES__URI", props["uri"])
    monkeypatch.setenv("PYICEBERG_CATALOG__TYPES__WAREHOUSE", props["warehouse"])
    catalog = SqlCatalog("types", **props)
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "u", UUIDType(), required=False),
        NestedField(3, "fx", FixedType(4), required=False),
        NestedField(4, "tm", TimeType(), required=False),
        NestedField(5, "dec", DecimalType(38, 10), required=False),
    )
    table = catalog.create_table("ns.t", schema=schema)
    rows = [
        {"id": i, "u": uuid.UUID(int=i).bytes if i % 3 else None, "fx": bytes([i, 0, 0, i]) if i % 2 else None,
         "tm": time(i, 0, 0, i) if i % 4 else None, "dec": Decimal(f"{i}.{i:010d}") if i % 5 else None}
        for i in range(1, 13)
    ]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    table.delete("id = 3 or id = 8")  # copy-on-write: rewrites the file, carry-over rows cancel
    return catalog


def test_uuid_fixed_time_and_decimal_round_trip(uncommon_table: SqlCatalog, spark: Any, tmp_path: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from icetail.monitor.engine.api import read_changes

    table = uncommon_table.load_table("ns.t")
    changes = read_changes(table, None, None)
    inserted = changes.filter(np.array(changes.column("_change_ordinal").to_pylist()) == 0)
    deleted = changes.filter(np.array(changes.column("_change_ordinal").to_pylist()) == 1)
    expected_all = table.scan(snapshot_id=table.metadata.snapshots[0].snapshot_id).to_arrow()
    data = ["id", "u", "fx", "tm", "dec"]
    assert sorted(inserted.select(data).to_pylist(), key=lambda r: r["id"]) == sorted(
        expected_all.select(data).to_pylist(), key=lambda r: r["id"])
    assert sorted(deleted.column("id").to_pylist()) == [3, 8]
    assert set(deleted.column("_change_type").to_pylist()) == {"DELETE"}

    target = tmp_path / "out.parquet"
    assert main(["changes", "--catalog", "types", "--table", "ns.t", "--output", str(target)]) == 0, capsys.readouterr()
    assert pq.read_table(target).num_rows == changes.num_rows


def test_a_type_pyiceberg_cannot_parse_is_one_line_exit_2(uncommon_table: SqlCatalog, tmp_path: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # a v3 `variant` column, as a newer writer would add it: pyiceberg 0.12 cannot parse the metadata
    location = uncommon_table.load_table("ns.t").metadata_location.removeprefix("file://")
    with open(location) as stream:
        metadata = json.load(stream)
    metadata["schemas"][-1]["fields"].append({"id": 99, "name": "payload", "type": "variant", "required": False})
    with open(location, "w") as stream:
        json.dump(metadata, stream)
    target = tmp_path / "out.parquet"
    code = main(["changes", "--catalog", "types", "--table", "ns.t", "--output", str(target)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Unsupported field type: 'variant'" in err, err
    assert not target.exists()
