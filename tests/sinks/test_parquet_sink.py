"""The parquet directory sink: files appear only when committed, replays replace their own file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from icetail.kernel.errors import ConfigError, SinkRejectedError
from icetail.sinks.base import Sink
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.registry import open_sink
from tests.sinks import CONSUMER, change_rows, key


def committed(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def test_each_chunk_is_one_committed_file_named_by_its_key(tmp_path: Path) -> None:
    sink = open_sink(f"parquet://{tmp_path}/out", consumer=CONSUMER)
    assert isinstance(sink, ParquetDirSink) and isinstance(sink, Sink)
    assert sink.exactly_once is True

    first = sink.write(key(0), change_rows([1, 2]))
    second = sink.write(key(0, 2), change_rows([3]))
    sink.close()

    assert first == key(0).name + ".parquet"
    assert second == key(0, 2).name + ".parquet"
    assert committed(tmp_path / "out") == sorted([first, second])
    assert pq.read_table(tmp_path / "out" / first).equals(change_rows([1, 2]))
    assert list((tmp_path / "out" / "_tmp" / CONSUMER).iterdir()) == []


def test_replayed_chunk_replaces_its_own_file(tmp_path: Path) -> None:
    sink = open_sink(f"parquet://{tmp_path}", consumer=CONSUMER)
    sink.write(key(0), change_rows([1, 2]))
    sink.write(key(1), change_rows([3]))
    sink.close()

    # a crash after the write but before the offset commit: a new run writes the chunk again
    again = open_sink(f"parquet://{tmp_path}", consumer=CONSUMER)
    token = again.write(key(1), change_rows([3]))
    again.close()

    assert token == key(1).name + ".parquet"
    assert len(committed(tmp_path)) == 2
    ids = ds.dataset(tmp_path, format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == [1, 2, 3]


def test_stale_tmp_files_of_this_consumer_are_removed_on_open(tmp_path: Path) -> None:
    mine = tmp_path / "_tmp" / CONSUMER
    theirs = tmp_path / "_tmp" / "other"
    mine.mkdir(parents=True)
    theirs.mkdir(parents=True)
    (mine / (key(0).name + ".parquet")).write_bytes(b"half a parquet file")
    (theirs / (key(0, consumer="other").name + ".parquet")).write_bytes(b"in flight elsewhere")

    sink = ParquetDirSink(tmp_path, consumer=CONSUMER)

    assert sink.stale_removed == 1
    assert list(mine.iterdir()) == []
    assert len(list(theirs.iterdir())) == 1
    assert committed(tmp_path) == []


def test_pyarrow_dataset_sees_only_committed_files(tmp_path: Path) -> None:
    sink = ParquetDirSink(tmp_path, consumer=CONSUMER)
    sink.write(key(0), change_rows([1, 2]))
    # a chunk caught between write and rename: a complete, valid parquet file under _tmp
    pq.write_table(change_rows([99]), tmp_path / "_tmp" / CONSUMER / (key(1).name + ".parquet"))

    table = ds.dataset(str(tmp_path), format="parquet").to_table()

    assert sorted(table.column("id").to_pylist()) == [1, 2]
    assert table.schema.names[-4:] == ["_change_type", "_change_ordinal", "_commit_snapshot_id", "_commit_timestamp"]


def test_names_sort_in_delivery_order(tmp_path: Path) -> None:
    sink = ParquetDirSink(tmp_path, consumer=CONSUMER)
    order = [key(0, 0), key(0, 1000), key(1, 0), key(10, 0)]
    for i, k in enumerate(reversed(order)):
        sink.write(k, change_rows([i]))
    assert committed(tmp_path) == [k.name + ".parquet" for k in order]


def test_unusable_directory_and_foreign_or_late_writes_are_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="a-file"):
        ParquetDirSink(blocker, consumer=CONSUMER)

    sink = ParquetDirSink(tmp_path / "out", consumer=CONSUMER)
    with pytest.raises(ConfigError, match="other"):
        sink.write(key(0, consumer="other"), change_rows([1]))
    # rows parquet cannot store at all: terminal, and nothing is left behind
    with pytest.raises(SinkRejectedError, match="cannot be written"):
        sink.write(key(0), pa.table({"empty": pa.array([{}], pa.struct([]))}))
    assert committed(tmp_path / "out") == [] and list((tmp_path / "out" / "_tmp" / CONSUMER).iterdir()) == []
    sink.close()
    sink.close()
    with pytest.raises(SinkRejectedError):
        sink.write(key(0), change_rows([1]))


def test_schema_change_between_chunks_keeps_each_file_whole(tmp_path: Path) -> None:
    sink = ParquetDirSink(tmp_path, consumer=CONSUMER)
    sink.write(key(0), change_rows([1]))
    sink.write(key(1), change_rows([2], extra={"price": pa.array([9.5])}))

    files = [pq.read_table(tmp_path / name) for name in committed(tmp_path)]
    schema = pa.unify_schemas([f.schema for f in files])
    table = ds.dataset(str(tmp_path), format="parquet", schema=schema).to_table()

    assert sorted(zip(table.column("id").to_pylist(), table.column("price").to_pylist(), strict=True)) == [
        (1, None),
        (2, 9.5),
    ]
