"""The branch recorded per consumer (schema version 4), on SQLite and PostgreSQL alike.

A consumer follows one branch: the store records it at creation (`main` for every consumer
made before version 4, which followed the current snapshot, the head of `main`), and
`change_branch` is the operator's way to move it (`icetail reset --branch`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from icetail.kernel.errors import StateBusyError, StateConflictError
from icetail.state.checkpoint import Cursor
from icetail.state.migrations import _V1, _V2, _V3, LATEST_VERSION
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_batch, raw_create, raw_query

START = Cursor.before_first_snapshot()


def test_the_branch_is_recorded_at_creation_and_listed(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("audit", "cat", "db.t", START, "parquet:///a", "audit")
    store.ensure_consumer("plain", "cat", "db.t", START, "parquet:///b")
    assert store.load("audit").branch == "audit"  # type: ignore[union-attr]
    assert store.load("plain").branch == "main"  # type: ignore[union-attr]
    assert [(s.consumer, s.branch) for s in store.list_consumers()] == [("audit", "audit"), ("plain", "main")]
    # creating again keeps what is recorded: the pipeline compares and refuses a different branch
    store.ensure_consumer("audit", "cat", "db.t", START, "parquet:///a", "other")
    assert store.load("audit").branch == "audit"  # type: ignore[union-attr]


def test_change_branch_is_fenced_and_refused_while_a_batch_is_in_flight(
    open_test_store: Callable[..., SqlCheckpointStore],
) -> None:
    store = open_test_store()
    store.ensure_consumer("c", "cat", "db.t", START, "parquet:///out", "audit")
    store.acquire_lease("c", "runner", 60)
    with pytest.raises(StateBusyError, match="runner"):
        store.change_branch("c", "main")  # an operator write while a run holds the consumer
    store.release_lease("c", "runner")
    store.begin_batch("c", make_batch("b1", None, 10, 2))
    with pytest.raises(StateConflictError, match="b1 in flight on branch 'audit'.*--to to abandon it"):
        store.change_branch("c", "main")
    store.abandon_batch("c", "b1")
    store.change_branch("c", "main")
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.branch == "main" and checkpoint.sink == "parquet:///out"


def test_a_version_3_store_is_migrated_and_its_consumers_follow_main(store_url: str) -> None:
    """A store written by the previous release: version 4 adds the column, consumers keep their state."""
    statements = [
        *_V1,
        *_V2,
        *_V3,
        "CREATE TABLE icetail_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO icetail_meta VALUES ('schema_version', '3')",
        "INSERT INTO icetail_consumers (consumer, catalog_name, table_name, cursor_snapshot_id, cursor_timestamp_ms, "
        "generation, lease_owner, lease_expires_at_ms, created_at_ms, updated_at_ms, sink_url) "
        "VALUES ('old', 'cat', 'db.t', 5, 1005, 3, NULL, NULL, 1, 1, 'parquet:///out')",
    ]
    raw_create(store_url, statements)
    with open_store(store_url, create=False) as store:
        checkpoint = store.load("old")
        assert checkpoint is not None and checkpoint.cursor == Cursor(5, 1005)
        assert (checkpoint.sink, checkpoint.branch, checkpoint.generation) == ("parquet:///out", "main", 3)
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]
