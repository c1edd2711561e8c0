"""Taking, renewing and giving up a consumer's lease, on the database clock.

The lease is what fences every other write (rule 4 of state/contract.py, state/fencing.py); its
expiry is computed by the database, so no two hosts' clocks are ever compared.
"""

from __future__ import annotations

from icetail.kernel.errors import StateBusyError
from icetail.state.backend import Tx
from icetail.state.checkpoint import Lease
from icetail.state.fencing import busy_message, check_holder, lease_ttl_ms
from icetail.state.sql_core import SqlStoreCore


class SqlLeaseWrites(SqlStoreCore):
    """acquire_lease, renew_lease and release_lease."""

    def acquire_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        ttl_ms = lease_ttl_ms(ttl_seconds)
        if not owner:
            raise ValueError("lease owner must not be empty")

        def work(tx: Tx) -> Lease:
            row = self._require(tx, consumer, lock=True)
            held = row.lease
            if held is not None and held.owner != owner and held.is_live(row.now_ms):
                raise StateBusyError(busy_message(consumer, held, row.now_ms))
            return self._set_lease(tx, consumer, Lease(owner, row.now_ms + ttl_ms), row.now_ms)

        return self._write(work)

    def renew_lease(self, consumer: str, owner: str, ttl_seconds: float) -> Lease:
        ttl_ms = lease_ttl_ms(ttl_seconds)

        def work(tx: Tx) -> Lease:
            row = self._require(tx, consumer, lock=True)
            check_holder(consumer, owner, row)
            return self._set_lease(tx, consumer, Lease(owner, row.now_ms + ttl_ms), row.now_ms)

        return self._write(work)

    def release_lease(self, consumer: str, owner: str) -> None:
        def work(tx: Tx) -> None:
            tx.execute(
                "UPDATE icetail_consumers SET lease_owner = NULL, lease_expires_at_ms = NULL "
                "WHERE consumer = ? AND lease_owner = ?",
                (consumer, owner),
            )

        self._write(work)

    def _set_lease(self, tx: Tx, consumer: str, lease: Lease, now_ms: int) -> Lease:
        tx.execute(
            "UPDATE icetail_consumers SET lease_owner = ?, lease_expires_at_ms = ?, updated_at_ms = ? "
            "WHERE consumer = ?",
            (lease.owner, lease.expires_at_ms, now_ms, consumer),
        )
        return lease
