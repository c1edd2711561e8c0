"""The iceberg sink on a real pyiceberg SQL catalog (SQLite in tmp_path), found by load_catalog."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from icetail.kernel.errors import CatalogNotFoundError, ConfigError, SinkError, SinkRejectedError
from icetail.sinks.base import Sink
from icetail.sinks.iceberg.changelog import IcebergTableSink
from icetail.sinks.iceberg.ledger import CHUNK_ID_PROPERTY, CHUNK_ROWS_PROPERTY, CONSUMER_PROPERTY
from icetail.sinks.registry import open_sink
from tests.sinks import CATALOG, CONSUMER, change_rows, key

URL = f"iceberg://{CATALOG}/cdc.orders_changes"


def load(catalog: SqlCatalog) -> Table:
    return catalog.load_table("cdc.orders_changes")


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def test_creates_the_table_and_records_consumer_and_chunk_in_the_summary(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    assert isinstance(sink, IcebergTableSink) and isinstance(sink, Sink)
    assert sink.exactly_once is True

    token = sink.write(key(0), change_rows([1, 2, 3]))
    sink.close()

    table = load(sql_catalog)
    assert [f.name for f in table.schema().fields] == [
        "id",
        "name",
        "_change_type",
        "_change_ordinal",
        "_commit_snapshot_id",
        "_commit_timestamp",
    ]
    assert all(not f.required for f in table.schema().fields)
    snapshot = table.current_snapshot()
    assert snapshot is not None and token == str(snapshot.snapshot_id)
    assert snapshot.summary is not None
    assert snapshot.summary.get(CONSUMER_PROPERTY) == CONSUMER
    assert snapshot.summary.get(CHUNK_ID_PROPERTY) == key(0).name
    assert snapshot.summary.get(CHUNK_ROWS_PROPERTY) == "3"
    assert ids(table) == [1, 2, 3]
    assert table.scan().to_arrow().column("_change_type").to_pylist() == ["INSERT"] * 3


def test_replayed_chunk_is_skipped_in_the_same_run_and_after_a_restart(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    first = sink.write(key(0), change_rows([1, 2]))
    second = sink.write(key(1), change_rows([3]))
    assert sink.write(key(1), change_rows([3])) == second
    sink.close()

    # another consumer appends on top, then this consumer restarts and replays its chunks
    other = open_sink(URL, consumer="billing")
    other.write(key(0, consumer="billing"), change_rows([7]))
    other.close()
    restarted = open_sink(URL, consumer=CONSUMER)
    assert restarted.write(key(0), change_rows([1, 2])) == first
    assert restarted.write(key(1), change_rows([3])) == second
    third = restarted.write(key(2), change_rows([4]))
    restarted.close()

    table = load(sql_catalog)
    assert ids(table) == [1, 2, 3, 4, 7]
    assert len(table.metadata.snapshots) == 4
    assert third == str(table.metadata.snapshots[-1].snapshot_id)


def test_replay_with_different_rows_is_refused(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    sink.write(key(0), change_rows([1, 2]))
    with pytest.raises(SinkRejectedError, match="chunk boundaries"):
        sink.write(key(0), change_rows([1, 2, 3]))


def test_schema_at_open_creates_the_table_before_any_write(sql_catalog: SqlCatalog) -> None:
    open_sink(URL, consumer=CONSUMER, schema=change_rows([1]).schema).close()

    table = load(sql_catalog)
    assert table.current_snapshot() is None
    assert "_commit_timestamp" in table.schema().column_names


def test_change_stream_schema_evolution(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    sink.write(key(0), change_rows([1], extra={"qty": pa.array([5], pa.int32())}))
    # a new column, a widened type (int -> long), then a column the stream no longer has
    sink.write(key(1), change_rows([2], extra={"qty": pa.array([2**40], pa.int64()), "note": pa.array(["x"])}))
    sink.write(key(2), change_rows([3]))
    sink.close()

    table = load(sql_catalog)
    schema = table.schema()
    assert str(schema.find_field("qty").field_type) == "long"
    assert str(schema.find_field("note").field_type) == "string"
    rows = sorted(table.scan().to_arrow().select(["id", "qty", "note"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "qty": 5, "note": None},
        {"id": 2, "qty": 2**40, "note": "x"},
        {"id": 3, "qty": None, "note": None},
    ]


def test_narrower_rows_are_cast_to_the_table_types(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    sink.write(key(0), change_rows([1], extra={"qty": pa.array([2**40], pa.int64())}))
    sink.write(key(1), change_rows([2], extra={"qty": pa.array([7], pa.int32())}))

    table = load(sql_catalog)
    assert str(table.schema().find_field("qty").field_type) == "long"
    assert sorted(table.scan().to_arrow().column("qty").to_pylist()) == [7, 2**40]


def test_incompatible_type_change_is_terminal(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    sink.write(key(0), change_rows([1], extra={"qty": pa.array([5], pa.int64())}))
    with pytest.raises(SinkRejectedError, match="does not fit the table"):
        sink.write(key(1), change_rows([2], extra={"qty": pa.array(["five"])}))
    assert len(load(sql_catalog).metadata.snapshots) == 1


def test_unknown_catalog_is_a_one_line_terminal_error(sql_catalog: SqlCatalog) -> None:
    with pytest.raises(CatalogNotFoundError, match="nosuchcat") as info:
        open_sink("iceberg://nosuchcat/cdc.t", consumer=CONSUMER)
    assert "\n" not in str(info.value)


def test_unreachable_catalog_is_a_transient_sink_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened like the source's catalog, but failing the sink stage: the service retries it as a sink failure."""
    monkeypatch.setenv("PYICEBERG_CATALOG__GONECAT__URI", "http://127.0.0.1:1")  # a REST catalog, nobody listening
    with pytest.raises(SinkError, match="iceberg sink: catalog 'gonecat' is unreachable") as info:
        open_sink("iceberg://gonecat/cdc.t", consumer=CONSUMER)
    assert info.value.stage == "sink" and "\n" not in str(info.value)


def test_a_missing_catalog_folder_is_a_terminal_sink_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in a SQLite catalog's path is no outage to retry (issue 48): refused, and nothing made."""
    monkeypatch.setenv("PYICEBERG_CATALOG__GONECAT__URI", f"sqlite:///{tmp_path}/no/such/dir/catalog.db")
    with pytest.raises(ConfigError, match=f"iceberg sink: catalog 'gonecat' .*folder {tmp_path}/no/such/dir does not"):
        open_sink("iceberg://gonecat/cdc.t", consumer=CONSUMER)
    assert list(tmp_path.iterdir()) == []


def test_chunk_in_a_rolled_back_snapshot_is_written_again(sql_catalog: SqlCatalog) -> None:
    sink = open_sink(URL, consumer=CONSUMER)
    first = sink.write(key(0), change_rows([1]))
    sink.write(key(1), change_rows([2]))
    assert first is not None

    load(sql_catalog).manage_snapshots().rollback_to_snapshot(int(first)).commit()
    token = sink.write(key(1), change_rows([2]))

    table = load(sql_catalog)
    assert ids(table) == [1, 2]
    snapshot = table.current_snapshot()
    assert snapshot is not None and token == str(snapshot.snapshot_id)
