"""Leases keep a second run of the same consumer out, across store objects and processes."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event

import pytest

from icetail.kernel.errors import LeaseExpiredError, StateBusyError, TransientError
from icetail.state.checkpoint import Cursor
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_batch

START = Cursor.before_first_snapshot()


def test_second_store_object_is_refused(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    first, second = open_test_store(), open_test_store()
    first.ensure_consumer("c", "cat", "db.t", START)
    lease = first.acquire_lease("c", "run-1", 30)
    with pytest.raises(StateBusyError, match="leased to run-1") as info:
        second.acquire_lease("c", "run-2", 30)
    assert isinstance(info.value, TransientError)
    cp = second.load("c")
    assert cp is not None and cp.lease == lease and cp.lease_is_live()
    assert first.acquire_lease("c", "run-1", 60).expires_at_ms >= lease.expires_at_ms  # re-acquire extends
    first.release_lease("c", "run-1")
    second.acquire_lease("c", "run-2", 30)
    first.release_lease("c", "run-1")  # not the holder any more: a no-op
    cp = first.load("c")
    assert cp is not None and cp.lease is not None and cp.lease.owner == "run-2"


def test_expired_lease_can_be_taken_over(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    first, second = open_test_store(), open_test_store()
    first.ensure_consumer("c", "cat", "db.t", START)
    first.acquire_lease("c", "run-1", 0.2)
    first.renew_lease("c", "run-1", 0.2)
    time.sleep(0.3)
    cp = second.load("c")
    assert cp is not None and cp.lease is not None and not cp.lease_is_live()
    second.acquire_lease("c", "run-2", 30)
    with pytest.raises(StateBusyError, match="run-1 lost its lease to run-2"):
        first.renew_lease("c", "run-1", 30)


@pytest.mark.parametrize("offset_s", [600, -600], ids=["clock-ahead", "clock-behind"])
def test_lease_expiry_does_not_depend_on_the_callers_clock(
    open_test_store: Callable[..., SqlCheckpointStore], monkeypatch: pytest.MonkeyPatch, offset_s: int
) -> None:
    """A run on a host whose clock is ten minutes off neither steals a live lease nor keeps a dead
    one: expiry is set and compared on the store's clock (PostgreSQL's `clock_timestamp()`, SQLite's
    `julianday('now')`, read in the database), never on the caller's (issue 26)."""
    first, skewed = open_test_store(), open_test_store()
    first.ensure_consumer("c", "cat", "db.t", START)
    first.acquire_lease("c", "run-1", 30)
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + offset_s)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + offset_s * 1_000_000_000)
    with pytest.raises(StateBusyError, match="leased to run-1"):
        skewed.acquire_lease("c", "run-2", 30)
    cp = skewed.load("c")
    assert cp is not None and cp.lease_is_live() and cp.lease is not None and cp.lease.owner == "run-1"
    left_ms = cp.lease.expires_at_ms - cp.as_of_ms
    assert 0 < left_ms <= 30_000, left_ms  # a skew of 600 s would show here; a busy machine only shortens it
    first.acquire_lease("c", "run-1", 0.2)  # now a lease that dies at once
    time.sleep(0.3)
    skewed.acquire_lease("c", "run-2", 30)  # a dead lease is not kept alive by a clock behind
    with pytest.raises(StateBusyError, match="run-1 lost its lease to run-2"):
        first.renew_lease("c", "run-1", 30)


def test_writes_are_fenced_by_the_lease(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    store, operator = open_test_store(), open_test_store()
    store.ensure_consumer("c", "cat", "db.t", START)
    batch = make_batch("b1", None, 10, 1)
    (split_id,) = batch.split_ids
    with pytest.raises(StateBusyError, match="holds no lease"):
        store.begin_batch("c", batch, owner="run-1")
    store.acquire_lease("c", "run-1", 30)
    store.begin_batch("c", batch, owner="run-1")
    with pytest.raises(StateBusyError, match="leased to run-1"):  # no owner while a lease is live
        operator.commit_chunk("c", "b1", split_id, 5, 5, True)
    with pytest.raises(StateBusyError, match="leased to run-1"):
        operator.abandon_batch("c", "b1")
    with pytest.raises(StateBusyError, match="leased to run-1"):
        operator.reset_cursor("c", Cursor(3, 1003))
    with pytest.raises(StateBusyError, match="lost its lease to run-1"):
        operator.commit_chunk("c", "b1", split_id, 5, 5, True, owner="zombie")
    store.commit_chunk("c", "b1", split_id, 5, 5, True, owner="run-1")
    store.finish_batch("c", "b1", owner="run-1")
    store.release_lease("c", "run-1")
    operator.reset_cursor("c", START)  # nobody holds a lease: the operator may reset
    cp = operator.load("c")
    assert cp is not None and cp.cursor == START


def test_a_write_under_an_expired_lease_is_refused_until_renewed(
    open_test_store: Callable[..., SqlCheckpointStore],
) -> None:
    """Nobody took the lease over, yet its holder's write after the expiry (on the store's clock) is
    refused: another replica could have claimed it at that instant (issue 35). A renewal takes it
    again, and the same write then goes through."""
    store = open_test_store()
    store.ensure_consumer("c", "cat", "db.t", START)
    store.acquire_lease("c", "run-1", 0.3)
    batch = make_batch("b1", None, 10, 1)
    (split_id,) = batch.split_ids
    store.begin_batch("c", batch, owner="run-1")
    time.sleep(0.4)
    with pytest.raises(LeaseExpiredError, match=r"lease of run-1 expired .* s ago on the store's clock") as info:
        store.commit_chunk("c", "b1", split_id, 5, 5, True, owner="run-1")
    assert isinstance(info.value, TransientError) and not isinstance(info.value, StateBusyError)
    with pytest.raises(LeaseExpiredError):
        store.finish_batch("c", "b1", owner="run-1")
    cp = store.load("c")
    assert cp is not None and cp.inflight is not None and cp.inflight.progress_of(split_id).next_row_exclusive is None
    store.renew_lease("c", "run-1", 30)  # its own expired lease, not taken over: renewed
    store.commit_chunk("c", "b1", split_id, 5, 5, True, owner="run-1")
    store.finish_batch("c", "b1", owner="run-1")
    cp = store.load("c")
    assert cp is not None and cp.inflight is None and cp.cursor.snapshot_id == 10


def test_bad_ttl_is_refused(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            store.acquire_lease("c", "run-1", ttl)


def _hold_lease(url: str, ttl: float, acquired: Event, release: Event) -> None:
    """Child process: take the lease, say so, keep it until told to let go."""
    with open_store(url) as store:
        store.acquire_lease("c", "child", ttl)
        acquired.set()
        if release.wait(20):
            store.release_lease("c", "child")


def test_lease_excludes_another_process(sqlite_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with open_store(sqlite_url) as store:
        store.ensure_consumer("c", "cat", "db.t", START)
        acquired, release = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_hold_lease, args=(sqlite_url, 30.0, acquired, release))
        child.start()
        try:
            assert acquired.wait(20), "child never took the lease"
            with pytest.raises(StateBusyError, match="leased to child"):
                store.acquire_lease("c", "parent", 30)
            release.set()
            child.join(20)
            assert child.exitcode == 0
            store.acquire_lease("c", "parent", 30)
        finally:
            release.set()
            child.join(5)
            if child.is_alive():
                child.kill()


def test_lease_of_a_killed_process_expires(sqlite_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with open_store(sqlite_url) as store:
        store.ensure_consumer("c", "cat", "db.t", START)
        acquired, release = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_hold_lease, args=(sqlite_url, 1.0, acquired, release))
        child.start()
        assert acquired.wait(20), "child never took the lease"
        child.kill()  # SIGKILL: no release
        child.join(5)
        with pytest.raises(StateBusyError):
            store.acquire_lease("c", "parent", 30)
        cp = store.load("c")
        assert cp is not None and cp.lease is not None and cp.lease.owner == "child"
        time.sleep((cp.lease.expires_at_ms - cp.as_of_ms) / 1000 + 0.05)
        store.acquire_lease("c", "parent", 30)
