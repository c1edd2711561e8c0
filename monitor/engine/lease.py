"""A consumer's lease: one writer per consumer, taken when a pipeline opens, renewed while it runs.

The store fences every write of a batch by the lease's owner (begin_batch, commit_chunk), so a
run that lost its lease is refused at its next write; renewing keeps it. The owner is this run,
or the `serve` replica that runs the consumer (host:pid:token either way). Its own clock
(lease_clock.py) says until when the lease surely holds, so a run cut off from the store stops
before a write its lease may no longer cover (`check_before`).
"""

from __future__ import annotations

import os

from icetail.kernel.processes import host_name, lease_holder_is_dead, process_token
from icetail.monitor.engine.lease_clock import LeaseClock
from icetail.monitor.engine.store_handle import StoreHandle
from icetail.state.checkpoint import Checkpoint


def run_owner() -> str:
    """The lease owner of a run that was given none: host:pid:token."""
    return f"{host_name()}:{os.getpid()}:{process_token()}"


class ConsumerLease:
    """`consumer`'s lease in its checkpoint store, held by `owner` for `ttl_seconds` at a time."""

    def __init__(self, stores: StoreHandle, consumer: str, owner: str, ttl_seconds: float) -> None:
        self._stores = stores
        self._consumer = consumer
        self._owner = owner
        self._ttl_seconds = ttl_seconds
        self._clock = LeaseClock(consumer, ttl_seconds)  # until when the lease surely holds

    def acquire(self, checkpoint: Checkpoint) -> None:
        """Take the lease (StateBusyError while another run holds it). A lease left by a run on this
        host whose process is gone (a crash) is taken over at once instead of waiting for it to expire."""
        store = self._stores.store
        if checkpoint.lease_is_live() and checkpoint.lease is not None and lease_holder_is_dead(checkpoint.lease.owner):
            store.release_lease(self._consumer, checkpoint.lease.owner)
        with self._clock.renewal():
            store.acquire_lease(self._consumer, self._owner, self._ttl_seconds)

    def renew_if_due(self) -> None:
        """Renew the lease once a third of its TTL passed since the last renewal was sent."""
        if self._clock.due():
            with self._clock.renewal():  # a renewal that hangs or fails moves no deadline
                self._stores.store.renew_lease(self._consumer, self._owner, self._ttl_seconds)

    def check_before(self, what: str) -> None:
        """Before a sink write or a store commit of a batch: the lease renewed when due, then
        LeaseDeadlineError if it may have expired meanwhile (lease_clock.py)."""
        self.renew_if_due()
        self._clock.check(what)

    def check_deadline(self, what: str) -> None:
        """LeaseDeadlineError if the lease may have expired; no I/O (a sink calls it inside its own transaction)."""
        self._clock.check(what)

    def release(self) -> None:
        """Give the lease up; a no-op if this owner does not hold it."""
        self._stores.store.release_lease(self._consumer, self._owner)
        self._clock.released()
