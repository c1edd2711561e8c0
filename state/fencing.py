"""Fencing by the lease (rule 4 of state/contract.py): which writer may change a consumer.

A write that names an `owner` is refused unless that owner holds the consumer's lease and it is
still live on the database clock; a write without an owner (an operator action) is refused while
anyone's lease is live. The checks read the consumer row locked in the write's own transaction, so
a lease cannot change (nor expire unnoticed) between the check and the write.

Why an expired lease nobody took over no longer covers its holder's writes (issue 35): a replica
stops writing at its own deadline (monitor/engine/lease_clock.py), but a write sent just before it
may reach the store after the expiry, when another replica may claim the consumer at any moment.
Refusing it makes "no write outlives its lease" hold in the store itself, not only on the writer's
clock. Renewing such a lease is still allowed (it is a fresh acquire by the same owner).
"""

from __future__ import annotations

import math

from icetail.kernel.errors import LeaseExpiredError, StateBusyError
from icetail.state.checkpoint import Lease
from icetail.state.sql_rows import ConsumerRow


def lease_ttl_ms(ttl_seconds: float) -> int:
    if not ttl_seconds > 0 or math.isinf(ttl_seconds):
        raise ValueError(f"lease ttl must be a positive number of seconds, got {ttl_seconds}")
    return max(1, math.ceil(ttl_seconds * 1000))


def busy_message(consumer: str, held: Lease, now_ms: int) -> str:
    left = (held.expires_at_ms - now_ms) / 1000
    return (
        f"consumer {consumer!r} is leased to {held.owner} for another {left:.1f} s; "
        "stop that run or wait for its lease to expire"
    )


def check_holder(consumer: str, owner: str, row: ConsumerRow) -> None:
    """`owner` must hold the lease (live or expired: renewing an expired lease nobody took over is allowed)."""
    held = row.lease
    if held is None:
        raise StateBusyError(f"consumer {consumer!r}: {owner} holds no lease (released or never acquired)")
    if held.owner != owner:
        raise StateBusyError(f"consumer {consumer!r}: {owner} lost its lease to {held.owner}")


def check_live_holder(consumer: str, owner: str, row: ConsumerRow) -> None:
    """`owner` must hold the lease, and it must not have expired on the database clock."""
    check_holder(consumer, owner, row)
    held = row.lease
    if held is not None and not held.is_live(row.now_ms):
        ago = (row.now_ms - held.expires_at_ms) / 1000
        raise LeaseExpiredError(
            f"consumer {consumer!r}: the lease of {owner} expired {ago:.1f} s ago on the store's clock (not renewed "
            "in time); the write was refused so that none outlives its lease; the next cycle renews the lease and "
            "resumes from the checkpoint"
        )


def check_writer(consumer: str, owner: str | None, row: ConsumerRow) -> None:
    """Fence writes: an owner must hold a live lease; no owner means nobody may hold a live one."""
    if owner is not None:
        check_live_holder(consumer, owner, row)
    elif row.lease is not None and row.lease.is_live(row.now_ms):
        raise StateBusyError(busy_message(consumer, row.lease, row.now_ms))
