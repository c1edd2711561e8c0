"""JSON lines to a file and to stdout: strict JSON values, flushed per chunk, at least once."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.base import Sink
from icetail.sinks.files.jsonl import JsonlFileSink, StdoutSink
from icetail.sinks.files.jsonl_encoding import encode_jsonl
from icetail.sinks.registry import open_sink
from tests.sinks import CONSUMER, change_rows, key


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_appends_one_object_per_row_and_a_replay_appends_again(tmp_path: Path) -> None:
    path = tmp_path / "out" / "changes.jsonl"
    sink = open_sink(f"jsonl://{path}", consumer=CONSUMER)
    assert isinstance(sink, JsonlFileSink) and isinstance(sink, Sink)
    assert sink.exactly_once is False

    assert sink.write(key(0), change_rows([1, 2])) is None
    sink.write(key(1), change_rows([3]))
    sink.close()
    # at least once: a chunk replayed after a crash before its offset commit is appended again
    again = open_sink(f"jsonl://{path}", consumer=CONSUMER)
    again.write(key(1), change_rows([3]))
    again.close()

    rows = read_lines(path)
    assert [r["id"] for r in rows] == [1, 2, 3, 3]
    assert rows[0] == {
        "id": 1,
        "name": "n1",
        "_change_type": "INSERT",
        "_change_ordinal": 0,
        "_commit_snapshot_id": 1001,
        "_commit_timestamp": "2026-01-01T00:00:00.000000+00:00",
    }


def test_a_torn_last_line_is_cut_off_on_open(tmp_path: Path) -> None:
    path = tmp_path / "changes.jsonl"
    path.write_text('{"id":1}\n{"id":2}\n{"id":3, "na', encoding="utf-8")

    sink = JsonlFileSink(path, consumer=CONSUMER)
    sink.write(key(0), change_rows([3]))
    sink.close()

    assert sink.torn_bytes_removed == len('{"id":3, "na')
    assert [r["id"] for r in read_lines(path)] == [1, 2, 3]


def test_values_are_strict_json_without_loss() -> None:
    table = pa.table(
        {
            "ts": pa.array([1_767_225_600_123_456, None], pa.timestamp("us", tz="UTC")),
            "ts_ns": pa.array([1_767_225_600_123_456_789, None], pa.timestamp("ns")),
            "day": pa.array([datetime.date(2026, 1, 2), None]),
            "at": pa.array([datetime.time(3, 4, 5, 6), None], pa.time64("us")),
            "price": pa.array([decimal.Decimal("12.50"), None], pa.decimal128(10, 2)),
            "blob": pa.array([b"\x00\xff", None], pa.binary()),
            "uid": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([uuid.UUID(int=1).bytes, None], pa.binary(16))),
            "ratio": pa.array([float("nan"), float("inf")]),
            "tags": pa.array([{"a": "1"}, None], pa.map_(pa.string(), pa.string())),
            "counts": pa.array([[(1, 2)], []], pa.map_(pa.int32(), pa.int64())),
            "addr": pa.array([{"city": "Oslo", "since": datetime.date(2020, 1, 1)}, None]),
            "vals": pa.array([[1.5, float("-inf")], None]),
        }
    )
    lines = [line + "\n" for line in encode_jsonl(table).decode("utf-8").split("\n")[:-1]]
    assert all(line.endswith("\n") for line in lines)
    first, second = (json.loads(line) for line in lines)
    assert first == {
        "ts": "2026-01-01T00:00:00.123456+00:00",
        "ts_ns": "2026-01-01T00:00:00.123456789",
        "day": "2026-01-02",
        "at": "03:04:05.000006",
        "price": "12.50",
        "blob": "AP8=",
        "uid": "00000000-0000-0000-0000-000000000001",
        "ratio": "NaN",
        "tags": {"a": "1"},
        "counts": [{"key": 1, "value": 2}],
        "addr": {"city": "Oslo", "since": "2020-01-01"},
        "vals": [1.5, "-Infinity"],
    }
    assert second["ratio"] == "Infinity"
    assert [k for k, v in second.items() if v is not None] == ["ratio", "counts"]


def test_sliced_tables_encode_their_own_rows() -> None:
    table = pa.table({"m": pa.array([[("a", 1)], None, [("b", 2)], [("c", 3)]], pa.map_(pa.string(), pa.int64()))})
    assert [json.loads(line)["m"] for line in encode_jsonl(table.slice(1, 2)).split(b"\n")[:-1]] == [None, {"b": 2}]


@pytest.mark.parametrize("url", ["-", "stdout:"])
def test_stdout_sink(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    sink = open_sink(url, consumer=CONSUMER)
    assert isinstance(sink, StdoutSink) and sink.exactly_once is False
    sink.write(key(0), change_rows([1, 2]))
    sink.close()
    sink.close()
    out = capsys.readouterr().out
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 2]
    with pytest.raises(SinkRejectedError):
        sink.write(key(1), change_rows([3]))
