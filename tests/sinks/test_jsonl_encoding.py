"""The JSON-lines encoding is pinned: the same bytes as the row-by-row encoder that defined it.

`tests/sinks/data/every_type.jsonl` was written by that encoder (icetail before issue 15) from
`every_type_table()`; `tests/support/jsonl_reference.py` keeps it as the oracle for tables made
here at random (floats of every magnitude, strings with every escape, slices and chunks).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from icetail.sinks.files.jsonl_encoding import SLICE_ROWS, encode_jsonl, jsonl_buffers, write_jsonl_to
from tests.sinks import change_rows
from tests.support.jsonl_reference import every_type_table, reference_lines

GOLDEN = Path(__file__).parent / "data" / "every_type.jsonl"


def encoded(rows: pa.Table | pa.RecordBatch) -> str:
    return encode_jsonl(rows).decode("utf-8")


def reference(rows: pa.Table | pa.RecordBatch) -> str:
    return "".join(reference_lines(rows))


def test_every_type_encodes_to_the_pinned_bytes() -> None:
    assert encoded(every_type_table()) == GOLDEN.read_text(encoding="utf-8")


@pytest.mark.parametrize(("offset", "length"), [(0, 1), (1, 3), (2, 5), (6, 1), (3, 0)])
def test_slices_encode_their_own_rows(offset: int, length: int) -> None:
    table = every_type_table().slice(offset, length)
    assert encoded(table) == reference(table)
    for batch in table.to_batches():
        assert encoded(batch) == reference(batch)


def test_a_table_of_several_chunks_encodes_as_one() -> None:
    one = every_type_table()
    table = pa.concat_tables([one, one.slice(2), one.slice(0, 3)])
    assert table.column(0).num_chunks == 3
    assert encoded(table) == reference(table)


def test_floats_of_every_magnitude_match_pythons_repr() -> None:
    rng = np.random.default_rng(15)
    bits = rng.integers(0, 2**64, 20_000, dtype=np.uint64).view(np.float64)  # NaN and inf included
    scaled = rng.uniform(-1e6, 1e6, 20_000) * 10.0 ** rng.integers(-12, 22, 20_000)
    money = np.round(rng.normal(1000, 500, 20_000), 2)
    values = np.concatenate([bits, scaled, money, [0.0, -0.0, 1e16, 1e-4, 9.999999999999999e15, 0.0001]])
    mask = rng.random(values.size) < 0.05
    with np.errstate(over="ignore", invalid="ignore"):  # doubles beyond float32 become inf
        as_f32 = values.astype(np.float32)
    table = pa.table(
        {
            "f64": pa.array(values, mask=mask),
            "f32": pa.array(as_f32, mask=mask),
            "listed": pa.array([[v, -v] for v in values.tolist()], pa.list_(pa.float64())),
        }
    )
    assert encoded(table) == reference(table)


def test_strings_with_every_escape_match_json_dumps() -> None:
    rng = np.random.default_rng(16)
    alphabet = [chr(c) for c in range(0x80)] + ["é", "漢", "😀", "\u2028", "\ufeff"]
    values = ["".join(rng.choice(alphabet, size=rng.integers(0, 12))) for _ in range(5_000)]
    plain = [f"name-{i}" for i in range(5_000)]
    table = pa.table(
        {"mixed": pa.array(values), "plain": pa.array(plain), "keys": pa.array([[(v, v)] for v in values],
                                                                              pa.map_(pa.string(), pa.string()))}
    )  # fmt: skip
    assert encoded(table) == reference(table)


def test_timestamps_and_times_of_every_unit_and_year_match() -> None:
    rng = np.random.default_rng(17)
    columns = {}
    for unit, per_second in (("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)):
        low, high = (-62_135_596_800, 253_402_300_799) if unit != "ns" else (-9_223_372_036, 9_223_372_035)
        values = rng.integers(low, high, 2_000) * per_second + rng.integers(0, per_second, 2_000)
        for tz in (None, "UTC", "America/New_York"):
            columns[f"ts_{unit}_{tz}"] = pa.array(values, pa.timestamp(unit, tz))
        time_type = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
        storage = pa.int32() if unit in ("s", "ms") else pa.int64()
        columns[f"time_{unit}"] = pa.array(rng.integers(0, 86_400 * per_second, 2_000), storage).cast(time_type)
    table = pa.table(columns)
    assert encoded(table) == reference(table)


# A column with one value on every row is encoded once and shared (the change metadata of a
# chunk); these pin that it changes no byte, and that a column that only looks constant is not.


def test_change_rows_with_constant_metadata_match_the_reference() -> None:
    table = change_rows(list(range(1_000)), extra={"amount": pa.array([i / 8 for i in range(1_000)])})
    assert encoded(table) == reference(table)
    for offset, length in ((0, 1), (999, 1), (0, 2), (3, 500)):
        part = table.slice(offset, length)
        assert encoded(part) == reference(part)


@pytest.mark.parametrize("row", range(7))
def test_every_type_repeated_on_every_row_encodes_as_each_row(row: int) -> None:
    """Each row of every type (nulls, NaN, escapes, binary, UUIDs, structs) as a constant column."""
    table = every_type_table().take([row] * 5)
    assert encoded(table) == reference(table)
    single = every_type_table().slice(row, 1)
    assert encoded(single) == reference(single)


def test_columns_constant_but_for_one_row_are_encoded_per_row() -> None:
    """First and last equal with another value, or a null, in between: not constant."""
    rows = 9
    columns = {
        "middle": pa.array(["insert"] * 4 + ["delete"] + ["insert"] * 4),
        "middle_null": pa.array([7] * 4 + [None] + [7] * 4, pa.int32()),
        "first_null": pa.array([None] + [7] * 8, pa.int64()),
        "last_null": pa.array(["x"] * 8 + [None]),
        "ends": pa.array([1] * 8 + [2], pa.int64()),
        "zeros": pa.array([0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.0, 0.0, 0.0]),  # equal, but not the same text
        "nan": pa.array([float("nan")] * rows),
        "ts": pa.array([1_767_225_600_000_000] * 4 + [0] + [1_767_225_600_000_000] * 4, pa.timestamp("us", "UTC")),
        "flag": pa.array([True] * 4 + [None] + [True] * 4),
        "blob": pa.array([b"\x00"] * 4 + [b"\x01"] + [b"\x00"] * 4),
        "all_null": pa.nulls(rows, pa.string()),
        "shared": pa.array(['say "hi"\n'] * rows),  # constant, and needs escapes
    }
    table = pa.table(columns)
    assert encoded(table) == reference(table)
    for offset in range(rows):
        part = table.slice(offset, 3)
        assert encoded(part) == reference(part)


def test_a_batch_of_constant_columns_only() -> None:
    table = pa.table({"a": pa.array([1] * 4), "b": pa.nulls(4), "c": pa.array(["x"] * 4)})
    assert encoded(table) == '{"a":1,"b":null,"c":"x"}\n' * 4
    assert encoded(table.slice(0, 1)) == '{"a":1,"b":null,"c":"x"}\n'
    assert encoded(table.slice(0, 0)) == ""


def test_a_struct_with_a_constant_field() -> None:
    inner = pa.StructArray.from_arrays(
        [pa.array([1, 1, 1, 1], pa.int64()), pa.array(["a", "b", "c", "d"])],
        names=["k", "v"],
        mask=pa.array([False, True, False, False]),
    )
    table = pa.table({"s": inner, "n": pa.array([5, 5, 5, 5])})
    assert encoded(table) == reference(table)


@pytest.mark.parametrize("name", every_type_table().schema.names)
def test_every_type_without_nulls_encodes_as_the_reference(name: str) -> None:
    """A column without nulls leaves its quotes to the row join; with nulls it cannot (null is unquoted)."""
    column = every_type_table().column(name).combine_chunks()
    present = column.filter(column.is_valid())
    table = pa.table({name: present, "after": pa.array(range(len(present)))})
    assert encoded(table) == reference(table)


def test_strings_needing_escapes_are_found_in_any_slice_and_not_in_a_nulls_bytes() -> None:
    """The bytes of the whole column are looked at once: only the slice's, and a null's bytes spoil nothing."""
    values = ["plain", 'a"b', "plain", "tab\there", "back\\slash", "plain", "é漢", "plain"]
    for offset in range(len(values)):
        for length in (1, 2, 3):
            part = pa.table({"s": pa.array(values).slice(offset, length)})
            assert encoded(part) == reference(part)
    # a null whose slot holds bytes (Arrow allows it): `"` and a newline that belong to no value
    data = b'ab"\ncd'
    offsets = pa.py_buffer(np.array([0, 2, 4, 6], np.int32).tobytes())
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    column = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, pa.py_buffer(data)])
    table = pa.table({"s": column, "n": pa.array([1, 2, 3])})
    assert encoded(table) == '{"s":"ab","n":1}\n{"s":null,"n":2}\n{"s":"cd","n":3}\n'
    assert encoded(table) == reference(table)


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_timestamps_beyond_four_digit_years_match(unit: str) -> None:
    """Years 0, 10000 and before year 0 move the `T`: the slice holding one is encoded the long way."""
    per_second = {"s": 1, "ms": 10**3, "us": 10**6}[unit]
    first, after_last = -62_135_596_800, 253_402_300_800  # 0001-01-01, 10000-01-01
    seconds = [first, after_last - 1, 0, first - 1, after_last, 1_767_225_600, -70_000_000_000]
    for tz in (None, "UTC"):
        column = pa.array([s * per_second for s in seconds], pa.timestamp(unit, tz))
        for offset, length in ((0, 3), (0, 4), (1, 4), (3, 1), (4, 1), (4, 2), (5, 2), (0, 7)):
            table = pa.table({"ts": column.slice(offset, length), "n": pa.array(range(length))})
            assert encoded(table) == reference(table)


def _many_slices() -> list[pa.Table]:
    """Change rows over several slices (SLICE_ROWS) and batches of uneven sizes, with escapes."""
    rng = np.random.default_rng(7)
    parts = []
    for size in (70_000, 1, 0, 140_000, 3):
        ids = list(range(len(parts) * 1_000_000, len(parts) * 1_000_000 + size))
        extra = {
            "f": pa.array(rng.standard_normal(size) * 1e17, pa.float64()),
            "t": pa.array([f'q"{i}\\\n' if i % 9_999 == 0 else f"v{i}" for i in ids], pa.string()),
        }
        parts.append(change_rows(ids, snapshot_id=1000 + len(parts), extra=extra))
    return parts


def test_slices_encoded_on_threads_come_out_in_order_with_the_same_bytes() -> None:
    parts = _many_slices()
    one_thread = b"".join(b.to_pybytes() for b in jsonl_buffers(parts, threads=1))
    assert one_thread == b"".join(encode_jsonl(part) for part in parts)
    for threads in (2, 3):
        assert b"".join(b.to_pybytes() for b in jsonl_buffers(parts, threads=threads)) == one_thread
    first_rows = reference(parts[1]) + reference(parts[4])  # small parts: checked against the oracle
    assert encode_jsonl(parts[1]).decode() + encode_jsonl(parts[4]).decode() == first_rows


def test_writing_several_batches_counts_every_row_to_files_and_text_streams(tmp_path: Path) -> None:
    parts = _many_slices()
    expected = b"".join(encode_jsonl(part) for part in parts)
    with open(tmp_path / "out.jsonl", "w", encoding="utf-8") as stream:
        assert write_jsonl_to(stream, iter(parts)) == sum(p.num_rows for p in parts)
    assert (tmp_path / "out.jsonl").read_bytes() == expected
    text = io.StringIO()  # no binary buffer: written as text
    assert write_jsonl_to(text, parts[0]) == parts[0].num_rows
    assert text.getvalue().encode("utf-8") == encode_jsonl(parts[0])


def test_an_abandoned_encoding_stops_without_encoding_the_rest() -> None:
    parts = _many_slices()
    buffers = jsonl_buffers(parts, threads=2)
    first = next(buffers)
    buffers.close()  # returns once the slices in flight are done; nothing hangs
    assert first.to_pybytes() == encode_jsonl(parts[0].slice(0, SLICE_ROWS))
