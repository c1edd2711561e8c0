"""The iceberg sink commits on the metadata it holds: other writers and replays between its commits.

The sink does not reload the table before each chunk; its commit requires the branch head it
saw. These tests put another writer's commit between two of the sink's, on a real SQL catalog.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table, TableProperties

from icetail.kernel.errors import SinkError
from icetail.sinks.iceberg.changelog import IcebergStager, IcebergTableSink
from icetail.sinks.iceberg.commit import commit_view
from icetail.sinks.iceberg.ledger import CHUNK_ID_PROPERTY
from icetail.sinks.iceberg.stager import staged_file
from icetail.sinks.registry import open_sink
from tests.sinks import CONSUMER, change_rows, key
from tests.sinks.test_iceberg_sink import URL, ids, load


def _sink() -> IcebergTableSink:
    sink = open_sink(URL, consumer=CONSUMER)
    assert isinstance(sink, IcebergTableSink)
    return sink


def _stager(sink: IcebergTableSink) -> IcebergStager:
    stager = sink.stager(change_rows([0]).schema)
    assert isinstance(stager, IcebergStager)
    return pickle.loads(pickle.dumps(stager))


def _chunk_ids(sql_catalog: SqlCatalog) -> list[str]:
    return [s.summary.get(CHUNK_ID_PROPERTY, "") for s in load(sql_catalog).snapshots() if s.summary is not None]


def _logged(table: Table) -> list[str]:
    return [entry.metadata_file for entry in table.metadata.metadata_log]


def test_a_chunk_another_run_of_the_consumer_committed_meanwhile_is_not_appended_again(
    sql_catalog: SqlCatalog,
) -> None:
    """The held metadata lacks the chunk; the commit on it conflicts, and the reloaded table has it."""
    sink = _sink()
    sink.write(key(0), change_rows([1]))
    other = _sink()  # e.g. a run that took over when this one's lease expired
    token = other.write(key(1), change_rows([2]))
    other.close()

    assert sink.write(key(1), change_rows([2])) == token
    sink.close()

    assert ids(load(sql_catalog)) == [1, 2]
    assert _chunk_ids(sql_catalog) == [key(0).name, key(1).name]


def test_a_staged_chunk_another_run_committed_meanwhile_is_not_appended_again(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    stager = _stager(sink)
    sink.commit_staged(key(0), stager.stage(key(0), change_rows([1])))
    other = _sink()
    token = other.commit_staged(key(1), _stager(other).stage(key(1), change_rows([2])))
    other.close()

    again = stager.stage(key(1), change_rows([2]))
    assert sink.commit_staged(key(1), again) == token
    sink.close()

    assert ids(load(sql_catalog)) == [1, 2]
    assert _chunk_ids(sql_catalog) == [key(0).name, key(1).name]
    assert not Path(staged_file(again)[0].removeprefix("file:")).exists()


def test_another_writers_commit_between_chunks_is_kept_under_the_next_chunk(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    stager = _stager(sink)
    sink.commit_staged(key(0), stager.stage(key(0), change_rows([1])))
    billing = open_sink(URL, consumer="billing")
    between = billing.write(key(0, consumer="billing"), change_rows([7]))
    billing.close()

    token = sink.commit_staged(key(1), stager.stage(key(1), change_rows([2])))
    sink.close()

    table = load(sql_catalog)
    assert ids(table) == [1, 2, 7]
    current = table.current_snapshot()
    assert current is not None and str(current.snapshot_id) == token
    assert str(current.parent_snapshot_id) == between


def test_a_commit_outraced_by_another_writer_past_the_retries_says_so_in_one_line(sql_catalog: SqlCatalog) -> None:
    """Chaos harness, issue 26 (`sink-writer`, finding 14): the error named neither the other writer
    nor what to do, only pyiceberg's `Requirement failed: branch main has changed: expected id ...`."""
    first = _sink()
    first.write(key(0), change_rows([1]))
    first.close()
    with load(sql_catalog).transaction() as tx:
        tx.set_properties({TableProperties.COMMIT_NUM_RETRIES: "0"})
    sink = _sink()
    sink.write(key(1), change_rows([2]))  # the sink now holds the table's metadata
    load(sql_catalog).append(load(sql_catalog).scan(row_filter="id == 1").to_arrow())  # another writer's commit

    with pytest.raises(SinkError) as raised:
        sink.write(key(2), change_rows([3]))
    text = str(raised.value)
    assert "\n" not in text
    assert f"chunk {key(2).name} not written" in text, text
    assert "another writer committed to the table before each of the sink's 1 attempts" in text, text
    assert "commit.retry.num-retries is 0" in text and "run again to resume" in text, text

    sink.write(key(2), change_rows([3]))  # the next attempt (a rerun, serve's retry) commits it
    sink.close()
    assert ids(load(sql_catalog)) == [1, 1, 2, 3]
    assert _chunk_ids(sql_catalog)[-1] == key(2).name


def test_a_schema_change_another_writer_committed_meanwhile_is_redone_on_the_table_as_it_is(
    sql_catalog: SqlCatalog,
) -> None:
    """Chaos harness, issue 26 (`sink-writer`, finding 15): the sink's schema commit (the source's new
    column, or the field-id map) was made once, on the metadata it held: another writer's commit
    in between failed the run (`the table cannot be prepared: CommitFailedException: ...`)."""
    sink = _sink()
    sink.write(key(0), change_rows([1]))
    billing = open_sink(URL, consumer="billing")  # another consumer of the same source, into the same table
    billing.write(key(0, consumer="billing"), change_rows([7], extra={"note": pa.array(["b"])}))
    billing.close()

    token = sink.write(key(1), change_rows([2], extra={"note": pa.array(["a"])}))  # on its held metadata
    sink.close()

    table = load(sql_catalog)
    assert [f.name for f in table.schema().fields].count("note") == 1
    assert ids(table) == [1, 2, 7]
    current = table.current_snapshot()
    assert current is not None and str(current.snapshot_id) == token


def test_commits_on_held_metadata_keep_the_tables_whole_history(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    stager = _stager(sink)
    tokens = [sink.commit_staged(key(i), stager.stage(key(i), change_rows([i]))) for i in range(4)]
    sink.close()

    table = load(sql_catalog)
    assert [str(s.snapshot_id) for s in table.snapshots()] == tokens
    assert [str(entry.snapshot_id) for entry in table.metadata.snapshot_log] == tokens
    assert [s.parent_snapshot_id for s in table.snapshots()] == [None, *(int(t) for t in tokens[:-1])]
    assert TableProperties.COMMIT_NUM_RETRIES not in table.properties  # the view's setting is not committed
    assert ids(table) == [0, 1, 2, 3]


def test_old_metadata_files_are_still_removed_when_the_table_asks_for_it(sql_catalog: SqlCatalog) -> None:
    """pyiceberg prunes metadata files by the metadata log of the table it committed on: the view keeps it."""
    sink = _sink()
    stager = _stager(sink)
    sink.commit_staged(key(0), stager.stage(key(0), change_rows([0])))
    with load(sql_catalog).transaction() as transaction:
        transaction.set_properties(
            {
                TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",
                TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "1",
            }
        )
    stager = _stager(sink)  # a new batch: the sink reloads the table
    for i in range(1, 4):
        sink.commit_staged(key(i), stager.stage(key(i), change_rows([i])))
    sink.close()

    table = load(sql_catalog)
    assert len(table.metadata.metadata_log) == 1
    kept = {Path(urlparse(location).path) for location in (table.metadata_location, *_logged(table))}
    assert set(Path(urlparse(table.metadata_location).path).parent.glob("*.metadata.json")) == kept


def test_the_view_holds_the_branch_heads_only_and_no_retries(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    tokens = [sink.write(key(i), change_rows([i])) for i in range(3)]
    sink.close()
    table = load(sql_catalog)
    table.manage_snapshots().create_tag(int(tokens[0]), "first").commit()

    view = commit_view(load(sql_catalog))

    assert sorted(str(s.snapshot_id) for s in view.snapshots()) == sorted([tokens[0], tokens[2]])
    assert view.metadata.snapshot_log == [] and view.metadata.metadata_log == []
    assert view.properties[TableProperties.COMMIT_NUM_RETRIES] == "0"
    assert view.current_snapshot() == load(sql_catalog).current_snapshot()


@pytest.mark.parametrize("staged", [False, True])
def test_a_chunk_rolled_back_by_an_operator_is_committed_again(sql_catalog: SqlCatalog, staged: bool) -> None:
    """The held metadata still shows the chunk: a chunk found there is looked up again in the catalog."""
    sink = _sink()
    stager = _stager(sink)

    def deliver(i: int) -> str:
        if staged:
            return sink.commit_staged(key(i), stager.stage(key(i), change_rows([i])))
        return sink.write(key(i), change_rows([i]))

    first = deliver(0)
    deliver(1)
    load(sql_catalog).manage_snapshots().rollback_to_snapshot(int(first)).commit()

    token = deliver(1)
    sink.close()

    table = load(sql_catalog)
    assert ids(table) == [0, 1]
    current = table.current_snapshot()
    assert current is not None and str(current.snapshot_id) == token and str(current.parent_snapshot_id) == first
