"""A consumer's lease: one writer per consumer, taken when a pipeline opens, renewed while it runs.

The store fences every write of a batch by the lease's owner (begin_batch, commit_chunk), so a
run that lost its lease is refused at its next write; renewing keeps it. The owner is this run,
or the `serve` replica that runs the consumer (host:pid:token either way).
"""

from __future__ import annotations

import os
import time
import uuid

from icetail.kernel.processes import host_name, lease_holder_is_dead
from icetail.monitor.engine.store_handle import StoreHandle
from icetail.state.checkpoint import Checkpoint


def run_owner() -> str:
    """The lease owner of a run that was given none: host:pid:token."""
    return f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ConsumerLease:
    """`consumer`'s lease in its checkpoint store, held by `owner` for `ttl_seconds` at a time."""

    def __init__(self, stores: StoreHandle, consumer: str, owner: str, ttl_seconds: float) -> None:
        self._stores = stores
        self._consumer = consumer
        self._owner = owner
        self._ttl_seconds = ttl_seconds
        self._renewed_at = 0.0

    def acquire(self, checkpoint: Checkpoint) -> None:
        """Take the lease (StateBusyError while another run holds it). A lease left by a run on this
        host whose process is gone (a crash) is taken over at once instead of waiting for it to expire."""
        store = self._stores.store
        if checkpoint.lease_is_live() and checkpoint.lease is not None and lease_holder_is_dead(checkpoint.lease.owner):
            store.release_lease(self._consumer, checkpoint.lease.owner)
        store.acquire_lease(self._consumer, self._owner, self._ttl_seconds)
        self._renewed_at = time.monotonic()

    def renew_if_due(self) -> None:
        """Renew the lease once a third of its TTL passed since it was taken or last renewed."""
        if time.monotonic() - self._renewed_at > self._ttl_seconds / 3:
            self._renew()

    def _renew(self) -> None:
        self._stores.store.renew_lease(self._consumer, self._owner, self._ttl_seconds)
        self._renewed_at = time.monotonic()

    def release(self) -> None:
        """Give the lease up; a no-op if this owner does not hold it."""
        self._stores.store.release_lease(self._consumer, self._owner)
