"""The Debezium envelope of change rows (sinks/debezium.py): pairs become one record, streams may cut anywhere."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError
from icetail.sinks.debezium import EnvelopeSink, EnvelopeSource, envelope_batches, envelopes
from icetail.sinks.files.parquet import ParquetDirSink

AT = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def changes(kinds: list[str], ids: list[int]) -> pa.Table:
    n = len(kinds)
    return pa.table(
        {
            "id": ids,
            "v": [f"v{i}-{k[0]}" for i, k in zip(ids, kinds, strict=True)],
            "_change_type": kinds,
            "_change_ordinal": pa.array([0] * n, pa.int32()),
            "_commit_snapshot_id": [7] * n,
            "_commit_timestamp": pa.array([AT] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def test_each_change_is_one_record_and_a_pair_is_one_update() -> None:
    rows = changes(["DELETE", "UPDATE_BEFORE", "UPDATE_AFTER", "INSERT"], [1, 2, 2, 3])
    records = envelopes(rows, EnvelopeSource("db.t", {7: 4})).to_pylist()
    assert [r["op"] for r in records] == ["d", "u", "c"]
    assert records[1]["before"] == {"id": 2, "v": "v2-U"} and records[1]["after"]["id"] == 2
    assert records[0]["after"] is None and records[2]["before"] is None
    assert {r["source"]["sequence_number"] for r in records} == {4}
    assert {r["ts_ms"] for r in records} == {int(AT.timestamp() * 1000)}
    full = envelopes(changes(["INSERT"], [9]), EnvelopeSource("db.t", {7: 4}, full_start=True)).to_pylist()
    assert full[0]["op"] == "r" and full[0]["source"]["snapshot"] == "true"


def test_a_stream_cut_inside_a_pair_still_makes_one_record() -> None:
    rows = changes(["INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE"], [1, 2, 2, 3])
    cut = [rows.slice(0, 2).to_batches()[0], rows.slice(2).to_batches()[0]]
    records = pa.Table.from_batches(list(envelope_batches(cut, EnvelopeSource("db.t", {})))).to_pylist()
    assert [r["op"] for r in records] == ["c", "u", "d"]
    with pytest.raises(ValueError, match="without its UPDATE_AFTER"):
        list(envelope_batches(rows.slice(0, 2).to_batches(), EnvelopeSource("db.t", {})))


def test_a_mirror_sink_refuses_the_envelope(tmp_path: Path) -> None:
    EnvelopeSink(ParquetDirSink(tmp_path / "p", consumer="c"), "db.t")  # a parquet sink takes envelopes
    with pytest.raises(ConfigError, match="--format debezium applies to the jsonl"):
        EnvelopeSink(_GroupWriter(), "db.t")  # a mirror applies the changes itself


class _GroupWriter:
    """The smallest GroupWriteSink: what a mirror looks like to the envelope."""

    exactly_once = True

    def write(self, key, rows):  # type: ignore[no-untyped-def]
        return None

    def write_group(self, chunks):  # type: ignore[no-untyped-def]
        return []

    def close(self) -> None:
        return None
