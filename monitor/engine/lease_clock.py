"""Until when a consumer's lease surely holds, on this process's own clock (issue 35).

The store computes a lease's expiry on the database clock (state/sql_leases.py), which a process
cut off from the store cannot read. What the process knows on its own monotonic clock: a lease
acquired or renewed by a call *sent* at time `t` expires no earlier than `t + TTL`, since the
database read its clock after the call reached it; as long as the two clocks run at about the same
rate. The deadline is that minus a margin for the rates to differ and for a sink write begun just
before it to finish: 10% of the TTL, at least a second, never more than half the TTL (3 s of the
default 30 s).

The pipeline renews at a third of the TTL (`due`), so two renewals may fail before the deadline.
Before every sink write and store commit of a batch `check` raises LeaseDeadlineError once the
deadline passed: the batch stops there, and the next cycle renews the lease (or finds it taken
over) and resumes from the checkpoint. A renewal that hangs (the store cut off) moves nothing, so
a write after it is refused whenever it returns; one that returns moves the deadline to its own
send time plus the TTL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from icetail.kernel.errors import TransientError

MARGIN_FRACTION = 0.1  # of the TTL: clock-rate drift is far smaller; the rest lets a write begun in time end
MIN_MARGIN_SECONDS = 1.0
RENEW_FRACTION = 1 / 3  # renewed once a third of the TTL passed since the last renewal was sent


class LeaseDeadlineError(TransientError, stage="state"):
    """The lease could not be renewed in time: the batch stops before a write its lease may not cover."""


def lease_margin(ttl_seconds: float) -> float:
    """How long before `send time + TTL` a lease is taken for lost."""
    return min(ttl_seconds / 2, max(MIN_MARGIN_SECONDS, ttl_seconds * MARGIN_FRACTION))


class LeaseClock:
    """The send time of the last acquire or renewal that returned, and the deadline it gives.

    Renewals may come from two threads (a `serve` replica's beat and the consumer's cycle): the
    deadline only moves forward.
    """

    def __init__(self, consumer: str, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.consumer = consumer
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._sent: float | None = None  # None: no lease taken (or given up)

    @contextmanager
    def renewal(self) -> Iterator[None]:
        """Around an acquire or renew call: when it returns, the lease holds from the time it was sent."""
        sent = self._clock()
        yield
        with self._lock:
            if self._sent is None or sent > self._sent:
                self._sent = sent

    def released(self) -> None:
        """The lease was given up: nothing may be written until it is taken again."""
        with self._lock:
            self._sent = None

    def due(self) -> bool:
        """Whether a renewal is due: a third of the TTL passed since the last one was sent (or none was)."""
        sent = self._sent
        return sent is None or self._clock() - sent > self.ttl_seconds * RENEW_FRACTION

    def deadline(self) -> float | None:
        """The monotonic time until which the lease surely holds; None: no lease taken."""
        sent = self._sent
        return None if sent is None else sent + self.ttl_seconds - lease_margin(self.ttl_seconds)

    def check(self, before: str) -> None:
        """LeaseDeadlineError when the deadline passed; `before`: the write it guards, for the message."""
        deadline, now = self.deadline(), self._clock()
        if deadline is not None and now < deadline:
            return
        sent = self._sent
        ago = f"{now - sent:.1f} s ago" if sent is not None else "never"
        raise LeaseDeadlineError(
            f"consumer {self.consumer!r}: the lease could not be renewed in time (last renewal sent {ago}, "
            f"lease TTL {self.ttl_seconds:g} s); stopped before the {before} so that no write outlives the "
            "lease; the next cycle resumes from the checkpoint"
        )
