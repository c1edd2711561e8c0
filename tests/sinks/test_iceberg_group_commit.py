"""Several staged chunks committed as one Iceberg snapshot, each chunk still written once.

Real pyiceberg SQL catalog on SQLite, real staged files written by the Spark-task stager (run
in-process here: it is the same pickled object a task runs).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icetail.kernel.errors import ConfigError, SinkRejectedError
from icetail.sinks.base import ChunkKey, GroupCommitSink
from icetail.sinks.iceberg.changelog import IcebergStager, IcebergTableSink
from icetail.sinks.iceberg.ledger import (
    CHUNK_ID_PROPERTY,
    CHUNK_IDS_PROPERTY,
    CHUNK_ROWS_PROPERTY,
    CONSUMER_PROPERTY,
    ChunkLedger,
)
from icetail.sinks.iceberg.stager import staged_file
from icetail.sinks.registry import open_sink
from tests.sinks import CONSUMER, change_rows, key
from tests.sinks.test_iceberg_sink import URL, ids, load


def _sink(consumer: str = CONSUMER) -> IcebergTableSink:
    sink = open_sink(URL, consumer=consumer)
    assert isinstance(sink, IcebergTableSink) and isinstance(sink, GroupCommitSink)
    return sink


def _stager(sink: IcebergTableSink) -> IcebergStager:
    stager = sink.stager(change_rows([0]).schema)
    assert isinstance(stager, IcebergStager)
    return pickle.loads(pickle.dumps(stager))


def _staged(stager: IcebergStager, chunks: dict[int, list[int]]) -> list[tuple[ChunkKey, str]]:
    """Chunk i of split 0 (rows starting at 10 * i) staged with the given ids."""
    return [(key(0, 10 * i), stager.stage(key(0, 10 * i), change_rows(rows))) for i, rows in chunks.items()]


def _local(staged: str) -> Path:
    return Path(staged_file(staged)[0].removeprefix("file:"))


def test_a_group_is_one_snapshot_naming_every_chunk_and_its_rows(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    staged = _staged(_stager(sink), {0: [1, 2], 1: [3], 2: [4, 5, 6]})
    tokens = sink.commit_staged_group(staged)
    sink.close()

    table = load(sql_catalog)
    snapshots = table.snapshots()
    assert len(snapshots) == 1
    summary = snapshots[0].summary
    assert summary is not None
    assert summary.get(CONSUMER_PROPERTY) == CONSUMER
    assert summary.get(CHUNK_IDS_PROPERTY) == ",".join(k.name for k, _ in staged)
    assert summary.get(CHUNK_ROWS_PROPERTY) == "2,1,3"
    assert CHUNK_ID_PROPERTY not in summary.additional_properties
    assert tokens == [str(snapshots[0].snapshot_id)] * 3
    assert ids(table) == [1, 2, 3, 4, 5, 6]
    assert int(summary["added-data-files"]) == 3


def test_a_replayed_group_is_found_whole_and_its_new_files_are_removed(sql_catalog: SqlCatalog) -> None:
    """A crash after the sink commit, before the offsets: the resumed run stages the same chunks again."""
    sink = _sink()
    first = sink.commit_staged_group(_staged(_stager(sink), {0: [1], 1: [2]}))
    sink.close()

    resumed = _sink()  # a new process: the ledger is built from the table's history
    again = _staged(_stager(resumed), {0: [1], 1: [2]})
    assert resumed.commit_staged_group(again) == first
    resumed.close()

    assert ids(load(sql_catalog)) == [1, 2]
    assert len(load(sql_catalog).snapshots()) == 1
    assert not any(_local(s).exists() for _, s in again)


def test_a_group_regrouped_on_replay_appends_only_the_chunks_not_yet_held(sql_catalog: SqlCatalog) -> None:
    """Groups are cut by rows and time, so a resumed run may cut them differently: each chunk counts."""
    sink = _sink()
    stager = _stager(sink)
    held = sink.commit_staged_group(_staged(stager, {0: [1], 1: [2]}))
    single = sink.commit_staged(*_staged(stager, {2: [3]})[0])  # one chunk: the one-chunk summary
    sink.close()

    resumed = _sink()
    regrouped = _staged(_stager(resumed), {0: [1], 1: [2], 2: [3], 3: [4], 4: [5]})
    tokens = resumed.commit_staged_group(regrouped)
    resumed.close()

    table = load(sql_catalog)
    assert ids(table) == [1, 2, 3, 4, 5]
    snapshots = table.snapshots()
    assert len(snapshots) == 3
    assert tokens[:3] == [*held, single]
    assert tokens[3] == tokens[4] == str(snapshots[-1].snapshot_id)
    last = snapshots[-1].summary
    assert last is not None and last.get(CHUNK_IDS_PROPERTY) == ",".join(k.name for k, _ in regrouped[3:])
    assert not any(_local(s).exists() for _, s in regrouped[:3])
    assert all(_local(s).exists() for _, s in regrouped[3:])


def test_a_chunk_of_a_group_replayed_with_other_rows_is_refused(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    sink.commit_staged_group(_staged(_stager(sink), {0: [1], 1: [2, 3]}))
    with pytest.raises(SinkRejectedError, match="chunk boundaries must not change"):
        sink.commit_staged_group(_staged(_stager(sink), {0: [1], 1: [2]}))
    sink.close()
    assert ids(load(sql_catalog)) == [1, 2, 3]


def test_a_group_replaying_a_chunk_with_other_rows_commits_none_of_its_new_chunks(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    sink.commit_staged_group(_staged(_stager(sink), {0: [1], 1: [2, 3]}))
    with pytest.raises(SinkRejectedError, match="chunk boundaries must not change"):
        sink.commit_staged_group(_staged(_stager(sink), {0: [1, 9], 1: [2, 3], 2: [4]}))
    sink.close()
    assert ids(load(sql_catalog)) == [1, 2, 3]  # chunk 2 was not appended
    assert len(load(sql_catalog).snapshots()) == 1


def test_a_group_for_another_consumer_is_refused(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    stager = _stager(sink)
    other_key = key(0, 0, consumer="someone-else")
    with pytest.raises(ConfigError, match="someone-else"):
        sink.commit_staged_group([(other_key, stager.stage(other_key, change_rows([1])))])
    sink.close()


def test_the_ledger_reads_single_and_group_summaries_of_its_own_consumer_only(sql_catalog: SqlCatalog) -> None:
    sink = _sink()
    stager = _stager(sink)
    group = _staged(stager, {0: [1], 1: [2, 3]})
    sink.commit_staged_group(group)
    single = _staged(stager, {2: [4]})
    sink.commit_staged(*single[0])
    sink.close()
    other = _sink("another-consumer")
    other_key = key(0, 0, consumer="another-consumer")
    other.commit_staged(other_key, _stager(other).stage(other_key, change_rows([9])))
    other.close()

    ledger = ChunkLedger(CONSUMER)
    ledger.index(load(sql_catalog))
    snapshots = load(sql_catalog).snapshots()
    assert ledger.get(group[0][0].name) == (snapshots[0].snapshot_id, 1)
    assert ledger.get(group[1][0].name) == (snapshots[0].snapshot_id, 2)
    assert ledger.get(single[0][0].name) == (snapshots[1].snapshot_id, 1)
    assert ledger.get(other_key.name) is None
