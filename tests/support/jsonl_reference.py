"""The JSON-lines encoding as the row-by-row encoder defined it (icetail before issue 15), kept as
the oracle for the vectorized encoder in `icetail.sinks.files.jsonl_encoding`, and the table with every
type both are compared on.

Row by row: every column to Python values (`to_pylist`), floats, maps and nested values fixed
for strict JSON, then `json.dumps` of one dict per row. Slow (~20 us a row), obviously right.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Fixer = Callable[[Any], Any]


def reference_lines(rows: pa.Table | pa.RecordBatch) -> Iterator[str]:
    """One strict-JSON line (with its newline) per row."""
    batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
    fixers = [_fixer(field.type) for field in rows.schema]
    for batch in batches:
        if batch.num_rows == 0:
            continue
        names = batch.schema.names
        columns = [_prepare(col).to_pylist() for col in batch.columns]
        for i, fix in enumerate(fixers):
            if fix is not None:
                columns[i] = [fix(v) for v in columns[i]]
        for values in zip(*columns, strict=True):
            row = dict(zip(names, values, strict=True))
            yield json.dumps(row, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str) + "\n"


def _prepare(arr: pa.Array) -> pa.Array:
    t = arr.type
    if isinstance(t, pa.UuidType):
        return pa.array([None if b is None else str(uuid.UUID(bytes=b)) for b in arr.storage.to_pylist()], pa.string())
    if isinstance(t, pa.BaseExtensionType):
        return _prepare(arr.storage)
    if pa.types.is_dictionary(t):
        return _prepare(arr.dictionary_decode())
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S")
        text = pc.strftime(arr.cast(pa.timestamp(t.unit, "UTC")), format="%Y-%m-%dT%H:%M:%S")
        return pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
    if pa.types.is_time(t):
        return pc.strftime(arr, format="%H:%M:%S")
    if pa.types.is_date(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.array([None if b is None else base64.b64encode(b).decode("ascii") for b in arr.to_pylist()])
    if pa.types.is_struct(t):
        children = [_prepare(child) for child in arr.flatten()]
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=arr.is_null())
    if pa.types.is_map(t):
        offsets = arr.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        keys, items = arr.keys.slice(start, end - start), arr.items.slice(start, end - start)
        entries = pa.StructArray.from_arrays([keys, items], names=["key", "value"])
        return _prepare(pa.ListArray.from_arrays(pc.subtract(offsets, start), entries, mask=arr.is_null()))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int64())
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths)])
        return pa.LargeListArray.from_arrays(offsets, _prepare(arr.flatten()), mask=arr.is_null())
    return arr


def _fixer(t: pa.DataType) -> Fixer | None:
    if isinstance(t, pa.UuidType):
        return None
    if isinstance(t, pa.BaseExtensionType):
        return _fixer(t.storage_type)
    if pa.types.is_dictionary(t):
        return _fixer(t.value_type)
    if pa.types.is_floating(t):
        return _float
    if pa.types.is_struct(t):
        fields = [(f.name, _fixer(f.type)) for f in t]
        if all(fix is None for _, fix in fields):
            return None
        return lambda v: None if v is None else {n: _apply(fix, v[n]) for n, fix in fields}
    if pa.types.is_map(t):
        key_fix, value_fix = _fixer(t.key_type), _fixer(t.item_type)
        string_keys = pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)

        def fix(v: Any) -> Any:
            if v is None:
                return None
            pairs = [(_apply(key_fix, e["key"]), _apply(value_fix, e["value"])) for e in v]
            return dict(pairs) if string_keys else [{"key": k, "value": x} for k, x in pairs]

        return fix
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _fixer(t.value_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    return None


def _apply(fix: Fixer | None, v: Any) -> Any:
    return v if fix is None else fix(v)


def _float(v: Any) -> Any:
    if v is None or math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


TRICKY_STRINGS = [
    "plain",
    "",
    'quote " and backslash \\ and slash /',
    "newline \n tab \t return \r backspace \b formfeed \f",
    "controls \x00 \x01 \x1f \x7f",
    "unicode é ø 漢字 😀 \u2028 \u2029",
    None,
]
TRICKY_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.1,
    2.5,
    1 / 3,
    123.45,
    1e15,
    9007199254740993.0,
    1e16,
    -1e16,
    1e22,
    1e300,
    1e-4,
    1.5e-4,
    9.99e-5,
    1e-5,
    5e-324,
    1.7976931348623157e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    None,
]


def every_type_table() -> pa.Table:
    """Seven rows of every type a change row can carry, with nulls, NaN, odd floats and odd strings."""
    n = 7
    utc = datetime.timezone.utc
    ts = [
        datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=utc) + datetime.timedelta(days=i * 400, seconds=i)
        for i in range(n - 1)
    ] + [None]
    floats = TRICKY_FLOATS + [None] * (-len(TRICKY_FLOATS) % n)
    width = len(floats) // n

    def chunks(values: list[Any]) -> list[Any]:
        return [values[i * width : (i + 1) * width] for i in range(n)]

    columns: dict[str, pa.Array] = {
        "i8": pa.array([1, -128, 127, 0, None, 5, 6], pa.int8()),
        "i16": pa.array([1, -32768, 32767, 0, None, 5, 6], pa.int16()),
        "i32": pa.array([1, -(2**31), 2**31 - 1, 0, None, 5, 6], pa.int32()),
        "i64": pa.array([1, -(2**63), 2**63 - 1, 0, None, 5, 6], pa.int64()),
        "u64": pa.array([1, 0, 2**64 - 1, 0, None, 5, 6], pa.uint64()),
        "f32": pa.array([1.5, 0.1, float("nan"), float("-inf"), None, 3.4e38, 1e-7], pa.float32()),
        "f64": pa.array([0.1, 1e16, float("nan"), float("inf"), None, -0.0, 1e-5]),
        "flag": pa.array([True, False, None, True, False, True, None]),
        "s": pa.array(TRICKY_STRINGS),
        "ls": pa.array(TRICKY_STRINGS, pa.large_string()),
        "dict_s": pa.array(TRICKY_STRINGS).dictionary_encode(),
        "bin": pa.array([b"\x00\xff", b"", None, b"abc", b"\n", b"x" * 5, b"\x80"]),
        "lbin": pa.array([b"\x00\xff", b"", None, b"abc", b"\n", b"x" * 5, b"\x80"], pa.large_binary()),
        "fixed": pa.array(
            [b"abcd", b"\x00\x00\x00\x01", None, b"zzzz", b"    ", b"1234", b"\xff\xff\xff\xff"], pa.binary(4)
        ),
        "uid": pa.ExtensionArray.from_storage(
            pa.uuid(), pa.array([uuid.UUID(int=i * 7919).bytes if i != 2 else None for i in range(n)], pa.binary(16))
        ),
        "dec": pa.array(
            [
                decimal.Decimal("12.50"),
                decimal.Decimal("-0.01"),
                None,
                decimal.Decimal("0.00"),
                decimal.Decimal("99999999.99"),
                decimal.Decimal("1.00"),
                decimal.Decimal("-12345.67"),
            ],
            pa.decimal128(10, 2),
        ),
        "dec0": pa.array([decimal.Decimal(i * 10**30) if i != 3 else None for i in range(n)], pa.decimal128(38, 0)),
        "dec38": pa.array(
            [decimal.Decimal(f"{i}.{i:010d}") if i != 1 else None for i in range(n)], pa.decimal128(38, 10)
        ),
        "day": pa.array(
            [
                datetime.date(2026, 1, 2),
                datetime.date(1970, 1, 1),
                None,
                datetime.date(1, 1, 1),
                datetime.date(9999, 12, 31),
                datetime.date(2000, 2, 29),
                datetime.date(1969, 12, 31),
            ]
        ),
        "t_ms": pa.array([0, 1, None, 86_399_999, 3_600_000, 500, 61_001], pa.time32("ms")),
        "t_us": pa.array([0, 1, None, 86_399_999_999, 3_600_000_000, 500, 61_000_001], pa.time64("us")),
        "t_ns": pa.array([0, 1, None, 86_399_999_999_999, 3_600_000_000_000, 500, 61_000_000_001], pa.time64("ns")),
        "ts_us": pa.array([None if v is None else v.replace(tzinfo=None) for v in ts], pa.timestamp("us")),
        "ts_us_utc": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "ts_ms_oslo": pa.array(ts, pa.timestamp("ms", tz="Europe/Oslo")),
        "ts_s": pa.array(ts, pa.timestamp("s", tz="UTC")),
        "ts_ns": pa.array([None if v is None else int(v.timestamp()) * 10**9 + 7 for v in ts], pa.timestamp("ns")),
        "dur": pa.array([1, 0, None, -5, 86_400_000_000, 2, 3], pa.duration("us")),
        "nothing": pa.nulls(n),
        "floats": pa.array(chunks(floats), pa.list_(pa.float64())),
        "ints": pa.array([[1, None, 3], [], None, [None], [4], [5, 6], [7]], pa.list_(pa.int32())),
        "big_list": pa.array([["a"], [], None, ['"q"'], ["\n"], ["x", None], ["y"]], pa.large_list(pa.string())),
        "pair": pa.array(
            [[1.0, float("nan")], [2.0, 3.0], None, [0.0, -0.0], [1e16, 1e-5], [None, 1.0], [4.0, 5.0]],
            pa.list_(pa.float64(), 2),
        ),
        "nested": pa.array(
            [[[1, 2], None, []], None, [], [[None]], [[3]], [[4, 5], [6]], [None]], pa.list_(pa.list_(pa.int64()))
        ),
        "addr": pa.array(
            [
                {
                    "city": "Oslo",
                    "zip": 150,
                    "geo": {"lat": 59.9, "lon": float("nan")},
                    "since": datetime.date(2020, 1, 1),
                },
                None,
                {"city": None, "zip": None, "geo": None, "since": None},
                {"city": 'Q"uote', "zip": 1, "geo": {"lat": None, "lon": 1e16}, "since": datetime.date(1970, 1, 1)},
                {"city": "\t", "zip": 2, "geo": {"lat": 0.1, "lon": -0.0}, "since": None},
                {"city": "é", "zip": 3, "geo": {"lat": 1.0, "lon": 2.0}, "since": datetime.date(2000, 1, 1)},
                {"city": "", "zip": 4, "geo": None, "since": datetime.date(2001, 1, 1)},
            ]
        ),
        "people": pa.array(
            [
                [{"name": "a", "blob": b"\x01"}],
                None,
                [],
                [{"name": None, "blob": None}, None],
                [{"name": "b", "blob": b""}],
                [{"name": "c\n", "blob": b"\xff"}],
                [{"name": "d", "blob": b"dd"}],
            ],
            pa.list_(pa.struct([("name", pa.string()), ("blob", pa.binary())])),
        ),
        "tags": pa.array(
            [[("a", "1"), ("b", None)], None, [], [('k"', "v\n")], [("é", "x")], [("z", "")], [("y", "y")]],
            pa.map_(pa.string(), pa.string()),
        ),
        "scores": pa.array(
            [
                [("x", 1.5), ("nan", float("nan"))],
                [],
                None,
                [("inf", float("-inf"))],
                [("z", 0.1)],
                [("one", 1.0)],
                [("e", 1e-7)],
            ],
            pa.map_(pa.string(), pa.float64()),
        ),
        "by_id": pa.array(
            [[(1, ["a", None])], [(2, [])], None, [(3, None), (4, ["b"])], [], [(-1, ["c"])], [(0, ["\\"])]],
            pa.map_(pa.int32(), pa.list_(pa.string())),
        ),
        "by_day": pa.array(
            [[(datetime.date(2020, 1, 1), decimal.Decimal("1.10"))], None, [], [], [], [], []],
            pa.map_(pa.date32(), pa.decimal128(5, 2)),
        ),
        "ts_list": pa.array(
            [[ts[0], None], None, [], [ts[1]], [ts[2]], [ts[3]], [ts[4]]], pa.list_(pa.timestamp("us", tz="UTC"))
        ),
    }
    return pa.table(columns)
