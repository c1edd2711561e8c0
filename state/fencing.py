"""Fencing by the lease (rule 4 of state/contract.py): which writer may change a consumer.

A write that names an `owner` is refused unless that owner holds the consumer's lease; a write
without an owner (an operator action) is refused while anyone's lease is live. The checks read
the consumer row locked in the write's own transaction, so a lease cannot change between the
check and the write.
"""

from __future__ import annotations

import math

from icetail.kernel.errors import StateBusyError
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
    """`owner` must hold the lease; an expired lease nobody took over still counts as held."""
    held = row.lease
    if held is None:
        raise StateBusyError(f"consumer {consumer!r}: {owner} holds no lease (released or never acquired)")
    if held.owner != owner:
        raise StateBusyError(f"consumer {consumer!r}: {owner} lost its lease to {held.owner}")


def check_writer(consumer: str, owner: str | None, row: ConsumerRow) -> None:
    """Fence writes: an owner must hold the lease; no owner means nobody may hold a live one."""
    if owner is not None:
        check_holder(consumer, owner, row)
    elif row.lease is not None and row.lease.is_live(row.now_ms):
        raise StateBusyError(busy_message(consumer, row.lease, row.now_ms))
