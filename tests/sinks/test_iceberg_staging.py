"""The iceberg sink's task-side path: a stager writes the data file, the driver commits it once."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.base import StagingSink
from icetail.sinks.iceberg.changelog import IcebergStager, IcebergTableSink
from icetail.sinks.iceberg.ledger import CHUNK_ID_PROPERTY, CHUNK_ROWS_PROPERTY
from icetail.sinks.iceberg.stager import staged_file
from icetail.sinks.registry import open_sink
from tests.sinks import CONSUMER, change_rows, key
from tests.sinks.test_iceberg_sink import URL, ids, load

IDENT = "cdc.orders_changes"


def _open(schema: pa.Schema) -> tuple[IcebergTableSink, IcebergStager]:
    sink = open_sink(URL, consumer=CONSUMER)
    assert isinstance(sink, IcebergTableSink) and isinstance(sink, StagingSink)
    stager = sink.stager(schema)
    assert isinstance(stager, IcebergStager)
    # what Spark does with it: the stager travels to the tasks pickled
    return sink, pickle.loads(pickle.dumps(stager))


def _data_files(catalog: SqlCatalog) -> list[str]:
    return sorted(task.file.file_path for task in load(catalog).scan().plan_files())


def test_staged_chunk_is_a_table_data_file_with_field_ids_committed_with_its_chunk_id(
    sql_catalog: SqlCatalog,
) -> None:
    rows = change_rows([1, 2, 3])
    sink, stager = _open(rows.schema)
    staged = stager.stage(key(0), rows)
    path, written = staged_file(staged)
    assert Path(path.removeprefix("file:")).name.startswith("icetail-" + key(0).name)
    assert load(sql_catalog).current_snapshot() is None  # written, not yet visible

    token = sink.commit_staged(key(0), staged)
    sink.close()

    table = load(sql_catalog)
    snapshot = table.current_snapshot()
    assert snapshot is not None and token == str(snapshot.snapshot_id)
    assert snapshot.summary is not None
    assert snapshot.summary.get(CHUNK_ID_PROPERTY) == key(0).name
    assert snapshot.summary.get(CHUNK_ROWS_PROPERTY) == "3"
    assert _data_files(sql_catalog) == [path]
    assert ids(table) == [1, 2, 3]
    # the task's DataFile, committed as is, is what pyiceberg makes of the file's footer
    assert written == parquet_file_to_data_file(table.io, table.metadata, path)
    schema = pq.read_schema(path.removeprefix("file:"))
    field_ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema}
    assert field_ids == {f.name: f.field_id for f in table.schema().fields}


@pytest.mark.parametrize("record", ["bm90IGEgcGlja2xl", "garbage!", "bare"])
def test_a_staged_record_the_driver_cannot_take_back_falls_back_to_the_footer(
    sql_catalog: SqlCatalog, record: str
) -> None:
    """An executor with another pyiceberg, a damaged token: the driver reads the file's footer instead."""
    rows = change_rows([1, 2, 3])
    sink, stager = _open(rows.schema)
    path, written = staged_file(stager.stage(key(0), rows))
    assert written is not None
    token = path if record == "bare" else f"{path}\n{record}"
    assert staged_file(token) == (path, None)
    assert sink.commit_staged(key(0), token) == str(load(sql_catalog).current_snapshot().snapshot_id)  # type: ignore[union-attr]
    sink.close()
    assert ids(load(sql_catalog)) == [1, 2, 3]
    assert load(sql_catalog).scan().plan_files()[0].file.record_count == 3


def test_replayed_staged_chunk_is_not_appended_twice_and_its_new_file_is_deleted(sql_catalog: SqlCatalog) -> None:
    rows = change_rows([1, 2])
    sink, stager = _open(rows.schema)
    first_staged = stager.stage(key(0), rows)
    first = sink.commit_staged(key(0), first_staged)
    sink.close()

    # a crash after the sink commit, before the offset commit: a new run stages the chunk again
    restarted, stager = _open(rows.schema)
    again = stager.stage(key(0), rows)
    assert staged_file(again)[0] != staged_file(first_staged)[0]
    assert restarted.commit_staged(key(0), again) == first
    restarted.close()

    assert not Path(staged_file(again)[0].removeprefix("file:")).exists()
    assert _data_files(sql_catalog) == [staged_file(first_staged)[0]]
    assert ids(load(sql_catalog)) == [1, 2]
    assert len(load(sql_catalog).metadata.snapshots) == 1


def test_replay_with_other_rows_and_a_file_of_another_chunk_are_refused(sql_catalog: SqlCatalog) -> None:
    rows = change_rows([1, 2])
    sink, stager = _open(rows.schema)
    sink.commit_staged(key(0), stager.stage(key(0), rows))
    with pytest.raises(SinkRejectedError, match="chunk boundaries"):
        sink.commit_staged(key(0), stager.stage(key(0), change_rows([1, 2, 3])))
    with pytest.raises(SinkRejectedError, match="is not chunk"):
        sink.commit_staged(key(1), stager.stage(key(2), rows))


def test_stager_evolves_the_table_before_the_tasks_write(sql_catalog: SqlCatalog) -> None:
    sink, stager = _open(change_rows([1]).schema)
    sink.commit_staged(key(0), stager.stage(key(0), change_rows([1])))
    wider = change_rows([2], extra={"qty": pa.array([5], pa.int32())})
    stager = sink.stager(wider.schema)
    assert stager is not None
    sink.commit_staged(key(1), stager.stage(key(1), wider))
    sink.close()

    table = load(sql_catalog).scan().to_arrow().sort_by("id")
    assert table.column("qty").to_pylist() == [None, 5]


def test_partitioned_sink_table_is_written_from_the_driver(sql_catalog: SqlCatalog) -> None:
    sql_catalog.create_namespace("cdc")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "name", StringType()))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "name"))
    sql_catalog.create_table(IDENT, schema=schema, partition_spec=spec)
    sink = open_sink(URL, consumer=CONSUMER)
    assert isinstance(sink, IcebergTableSink)
    assert sink.stager(change_rows([1]).schema) is None
    sink.write(key(0), change_rows([1, 2]))
    sink.close()
    assert ids(load(sql_catalog)) == [1, 2]
