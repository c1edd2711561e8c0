"""Checkpoint store semantics, run unchanged against SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from icetail.kernel.errors import ConfigError, ConsumerNotFoundError, StateConflictError, StateError
from icetail.state.checkpoint import ChunkCommit, Cursor
from icetail.state.store import SqlCheckpointStore
from tests.support.checkpoints import make_batch, raw_query

START = Cursor.before_first_snapshot()


def test_new_consumer_starts_at_initial_cursor(store: SqlCheckpointStore) -> None:
    cp = store.ensure_consumer("orders", "prod", "db.orders", Cursor(5, 1005))
    assert (cp.consumer, cp.catalog, cp.table) == ("orders", "prod", "db.orders")
    assert cp.cursor == Cursor(5, 1005)
    assert cp.inflight is None and cp.lease is None and cp.generation == 0
    assert store.load("missing") is None
    # ensure_consumer again keeps the stored cursor rather than the initial one
    assert store.ensure_consumer("orders", "prod", "db.orders", START).cursor == Cursor(5, 1005)


def test_consumer_bound_to_its_table(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "prod", "db.orders", START)
    with pytest.raises(ConfigError, match="follows prod.db.orders"):
        store.ensure_consumer("c", "prod", "db.other", START)


def test_unknown_consumer_is_refused(store: SqlCheckpointStore) -> None:
    with pytest.raises(ConsumerNotFoundError, match="ensure_consumer"):
        store.begin_batch("ghost", make_batch("b1", None, 10, 1))
    with pytest.raises(ConsumerNotFoundError):
        store.history("ghost")


def test_batch_round_trip_keeps_splits_in_order(store: SqlCheckpointStore, store_url: str) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 250)
    store.begin_batch("c", batch)
    cp = store.load("c")
    assert cp is not None and cp.inflight is not None
    assert cp.inflight.batch == batch  # every split, its tasks and delete files, in planned order
    assert cp.inflight.batch.split_ids == batch.split_ids
    assert all(p.next_row_exclusive is None and p.rows_emitted == 0 and not p.done for p in cp.inflight.progress)
    assert len(cp.inflight.pending()) == 250
    # one row per split, not one blob
    assert raw_query(store_url, "SELECT COUNT(*) FROM icetail_inflight_splits") == [(250,)]


def test_chunk_commits_accumulate_and_resume(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 3)
    s0, s1, s2 = batch.split_ids
    store.begin_batch("c", batch)
    store.commit_chunk("c", "b1", s0, 100, 90, False, "chunk-1")
    store.commit_chunk("c", "b1", s0, 250, 140, True, "chunk-2")
    store.commit_chunk("c", "b1", s1, 40, 40, False)
    cp = store.load("c")
    assert cp is not None and cp.inflight is not None
    p0 = cp.inflight.progress_of(s0)
    assert (p0.next_row_exclusive, p0.rows_emitted, p0.done, p0.sink_token) == (250, 230, True, "chunk-2")
    p1 = cp.inflight.progress_of(s1)
    assert (p1.next_row_exclusive, p1.rows_emitted, p1.done, p1.sink_token) == (40, 40, False, None)
    assert [s.split_id for s, _ in cp.inflight.pending()] == [s1, s2]
    assert cp.inflight.rows_emitted == 270


def test_offsets_only_move_forward(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 2)
    s0, s1 = batch.split_ids
    store.begin_batch("c", batch)
    store.commit_chunk("c", "b1", s0, 100, 100, False, "t1")
    with pytest.raises(StateConflictError, match="only move forward"):
        store.commit_chunk("c", "b1", s0, 99, 1, False)
    with pytest.raises(StateConflictError, match="only move forward"):
        store.commit_chunk("c", "b1", s0, 100, 0, False, "other")  # no progress, not done
    store.commit_chunk("c", "b1", s0, 100, 100, False, "t1")  # exact replay: accepted, not double counted
    store.commit_chunk("c", "b1", s0, 100, 0, True, "t2")  # finishing without new rows is progress
    with pytest.raises(StateConflictError, match="already done"):
        store.commit_chunk("c", "b1", s0, 200, 10, True)
    store.commit_chunk("c", "b1", s0, 100, 0, True, "t2")  # replay of the done commit
    with pytest.raises(StateConflictError, match="has no split"):
        store.commit_chunk("c", "b1", "no-such-split", 1, 1, False)
    with pytest.raises(StateConflictError, match="not b0"):
        store.commit_chunk("c", "b0", s1, 1, 1, False)
    with pytest.raises(ValueError):
        store.commit_chunk("c", "b1", s1, -1, 0, False)
    cp = store.load("c")
    assert cp is not None and cp.inflight is not None
    p0 = cp.inflight.progress_of(s0)
    assert (p0.next_row_exclusive, p0.rows_emitted, p0.done, p0.sink_token) == (100, 100, True, "t2")


def test_begin_batch_compare_and_swap(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", Cursor(5, 1005))
    with pytest.raises(StateConflictError, match="cursor is at snapshot 5"):
        store.begin_batch("c", make_batch("b1", None, 10, 1))
    batch = make_batch("b1", 5, 10, 2)
    store.begin_batch("c", batch)
    store.begin_batch("c", batch)  # the same batch again: a replay, accepted
    with pytest.raises(StateConflictError, match="already has batch b1 in flight"):
        store.begin_batch("c", make_batch("b2", 5, 11, 2))
    with pytest.raises(StateConflictError, match="already has batch b1 in flight"):
        store.begin_batch("c", make_batch("b1", 5, 10, 3))  # same id, different splits


def test_finish_batch_advances_cursor_and_records_history(store: SqlCheckpointStore, store_url: str) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 2)
    s0, s1 = batch.split_ids
    store.begin_batch("c", batch)
    store.commit_chunk("c", "b1", s0, 10, 7, True)
    with pytest.raises(StateConflictError, match="1 of 2 splits not done"):
        store.finish_batch("c", "b1")
    store.commit_chunk("c", "b1", s1, 20, 13, True)
    with pytest.raises(StateConflictError, match="not b2"):
        store.finish_batch("c", "b2")
    entry = store.finish_batch("c", "b1")
    assert (entry.batch_id, entry.from_snapshot_exclusive, entry.to_snapshot_inclusive) == ("b1", None, 10)
    assert (entry.rows, entry.split_count) == (20, 2)
    assert entry.finished_at_ms >= entry.started_at_ms
    cp = store.load("c")
    assert cp is not None
    assert cp.cursor == Cursor(10, batch.to_timestamp_ms) and cp.inflight is None and cp.generation == 1
    assert store.finish_batch("c", "b1") == entry  # replay of the finish returns the same entry
    assert store.history("c") == (entry,)
    assert raw_query(store_url, "SELECT COUNT(*) FROM icetail_inflight_splits") == [(0,)]
    # the next batch must start where the cursor now is
    with pytest.raises(StateConflictError, match="cursor is at snapshot 10"):
        store.begin_batch("c", make_batch("b2", None, 11, 1))
    store.begin_batch("c", make_batch("b2", 10, 11, 1))


def test_empty_batch_finishes_immediately(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    store.begin_batch("c", make_batch("b1", None, 10, 0))  # e.g. a snapshot that only rewrote files
    assert store.finish_batch("c", "b1").rows == 0
    cp = store.load("c")
    assert cp is not None and cp.cursor.snapshot_id == 10


def test_history_is_trimmed_newest_first(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    store = open_test_store(history_limit=3)
    store.ensure_consumer("c", "cat", "db.t", START)
    prev = None
    for snap in range(1, 6):
        store.begin_batch("c", make_batch(f"b{snap}", prev, snap, 0))
        store.finish_batch("c", f"b{snap}")
        prev = snap
    assert [h.batch_id for h in store.history("c")] == ["b5", "b4", "b3"]
    assert [h.batch_id for h in store.history("c", limit=2)] == ["b5", "b4"]
    assert store.history("c", limit=0) == ()


def test_abandon_then_reset_cursor(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", Cursor(5, 1005))
    batch = make_batch("b1", 5, 10, 2)
    store.begin_batch("c", batch)
    store.commit_chunk("c", "b1", batch.split_ids[0], 10, 10, True)
    with pytest.raises(StateConflictError, match="abandon it"):
        store.reset_cursor("c", Cursor(3, 1003))
    with pytest.raises(StateConflictError, match="not b9"):
        store.abandon_batch("c", "b9")
    store.abandon_batch("c", "b1")
    store.abandon_batch("c", "b1")  # nothing in flight any more: a no-op
    store.reset_cursor("c", Cursor(3, 1003))
    cp = store.load("c")
    assert cp is not None
    assert cp.cursor == Cursor(3, 1003) and cp.inflight is None and cp.generation == 1
    store.reset_cursor("c", START)
    cp = store.load("c")
    assert cp is not None and cp.cursor == START
    store.begin_batch("c", make_batch("b2", None, 10, 1))  # the abandoned batch id may be planned anew


def test_consumers_share_one_store(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("b-consumer", "cat", "db.t", START)
    store.ensure_consumer("a-consumer", "cat", "db.u", Cursor(7, 1007))
    store.begin_batch("b-consumer", make_batch("b1", None, 10, 2))
    store.begin_batch("a-consumer", make_batch("b1", 7, 10, 3))  # same batch id, other consumer: independent
    summaries = store.list_consumers()
    assert [(s.consumer, s.table, s.cursor.snapshot_id, s.inflight_batch_id) for s in summaries] == [
        ("a-consumer", "db.u", 7, "b1"),
        ("b-consumer", "db.t", None, "b1"),
    ]
    store.abandon_batch("a-consumer", "b1")
    cp = store.load("b-consumer")
    assert cp is not None and cp.inflight is not None and len(cp.inflight.batch.splits) == 2


def test_closed_store_refuses_calls(store: SqlCheckpointStore) -> None:
    store.close()
    store.close()
    with pytest.raises(StateError, match="closed"):
        store.load("c")


def test_threads_share_one_store_object(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 4)
    store.begin_batch("c", batch)

    def commit_all(split_id: str) -> None:
        for chunk in range(1, 11):
            store.commit_chunk("c", "b1", split_id, chunk * 10, 10, chunk == 10, f"{split_id}-{chunk}")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(commit_all, batch.split_ids))
    assert store.finish_batch("c", "b1").rows == 400


def test_commit_chunks_is_all_or_nothing(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 3)
    s0, s1, s2 = batch.split_ids
    store.begin_batch("c", batch)
    store.commit_chunk("c", "b1", s2, 50, 50, False)
    # s2 would move backwards: the whole call is refused, s0 and s1 stay untouched
    with pytest.raises(StateConflictError, match="only move forward"):
        store.commit_chunks(
            "c",
            "b1",
            [ChunkCommit(s0, 10, 10, True, "snap-10"), ChunkCommit(s1, 20, 0, True), ChunkCommit(s2, 5, 0, True)],
        )
    cp = store.load("c")
    assert cp is not None and cp.inflight is not None
    assert [p.next_row_exclusive for p in cp.inflight.progress] == [None, None, 50]
    commits = [ChunkCommit(s0, 10, 10, True, "snap-10"), ChunkCommit(s1, 20, 0, True), ChunkCommit(s2, 60, 0, True)]
    store.commit_chunks("c", "b1", commits)
    store.commit_chunks("c", "b1", commits)  # replay
    with pytest.raises(ValueError, match="more than once"):
        store.commit_chunks("c", "b1", [ChunkCommit(s0, 10, 10, True), ChunkCommit(s0, 10, 10, True)])
    assert store.finish_batch("c", "b1").rows == 60
