"""A snapshot reconciled in partitions: its delivered partitions are durable and only move forward.

Schema 7 adds the batch's partition size (BatchShape.reconcile_partition_bytes) and, per split,
`parts_done`, kept on the snapshot's first split (its anchor) while the snapshot is delivered
partition by partition; the last partition's commit marks every split of the snapshot done in
the same transaction. On SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from icetail.kernel.errors import StateConflictError
from icetail.state.checkpoint import BatchShape, ChunkCommit, Cursor
from icetail.state.migrations import LATEST_VERSION, META_DDL, MIGRATIONS
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_batch, raw_create, raw_query

START = Cursor.before_first_snapshot()


def test_partitions_are_committed_in_order_and_the_last_finishes_the_snapshot(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = dataclasses.replace(make_batch("b1", None, 10, 3), shape=BatchShape(reconcile_partition_bytes=1 << 20))
    anchor, other, _ = batch.split_ids
    store.begin_batch("c", batch)
    loaded = store.load("c")
    assert loaded is not None and loaded.inflight is not None
    assert loaded.inflight.batch.shape.reconcile_partition_bytes == 1 << 20
    assert [p.parts_done for p in loaded.inflight.progress] == [None, None, None]

    store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 5, False, "t0", 1, "cut-a")])
    store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 5, False, "t0", 1, "cut-a")])  # a replay: no-op
    with pytest.raises(StateConflictError, match="cut into partitions as cut-a, not cut-b"):
        store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 0, False, None, 2, "cut-b")])
    store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 0, False, None, 2, "cut-a")])  # an empty partition
    with pytest.raises(StateConflictError, match="delivered once, in order"):
        store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 5, False, "t0", parts_done=1)])
    with pytest.raises(StateConflictError, match="only move forward"):  # an ordinary chunk cannot stand still
        store.commit_chunks("c", "b1", [ChunkCommit(anchor, 0, 5, False, "t9")])
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.inflight is not None
    progress = checkpoint.inflight.progress
    assert [(p.parts_done, p.parts_key, p.rows_emitted, p.done) for p in progress] == [
        (2, "cut-a", 5, False),
        (None, None, 0, False),
        (None, None, 0, False),
    ]

    last = [ChunkCommit(anchor, 100, 7, True, "t2", parts_done=3), ChunkCommit(other, 80, 0, True)]
    store.commit_chunks("c", "b1", last)
    store.commit_chunks("c", "b1", last)  # a replay of the last commit
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.inflight is not None
    assert [(p.parts_done, p.rows_emitted, p.done) for p in checkpoint.inflight.progress[:2]] == [
        (3, 12, True),
        (None, 0, True),
    ]
    store.commit_chunk("c", "b1", batch.split_ids[2], 50, 1, True)
    entry = store.finish_batch("c", "b1")
    assert entry.rows == 13 and entry.shape.reconcile_partition_bytes == 1 << 20


def test_a_schema_6_batch_in_flight_migrates_to_whole_snapshot_reconciliation(
    open_test_store: Callable[..., SqlCheckpointStore], store_url: str
) -> None:
    """A batch written ahead before schema 7 has no partition size: it keeps reconciling in the driver."""
    raw_create(
        store_url,
        [
            META_DDL,
            *(s for m in MIGRATIONS if m.version <= 6 for s in m.statements),
            "INSERT INTO icetail_meta VALUES ('schema_version', '6')",
        ],
    )
    with open_store(store_url) as store:
        store.ensure_consumer("c", "cat", "db.t", START)
        store.begin_batch("c", make_batch("b1", None, 10, 2))
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]
    store = open_test_store()
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.inflight is not None
    assert checkpoint.inflight.batch.shape.reconcile_partition_bytes is None
    assert all(p.parts_done is None for p in checkpoint.inflight.progress)
