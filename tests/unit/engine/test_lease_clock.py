"""The lease deadline on the process's own clock (monitor/engine/lease_clock.py), on a clock the test moves.

The process-level proof, a run cut off from PostgreSQL mid-batch, is tests/service/test_partition.py.
"""

from __future__ import annotations

import pytest

from icetail.kernel.errors import TransientError
from icetail.monitor.engine.lease_clock import LeaseClock, LeaseDeadlineError, lease_margin


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_margin_is_a_tenth_of_the_ttl_at_least_a_second_at_most_half() -> None:
    assert lease_margin(30) == pytest.approx(3.0)
    assert lease_margin(6) == pytest.approx(1.0)
    assert lease_margin(120) == pytest.approx(12.0)
    assert lease_margin(1.5) == pytest.approx(0.75)


def test_the_deadline_counts_from_when_the_renewal_was_sent_not_when_it_returned() -> None:
    clock = Clock()
    lease = LeaseClock("c", 30, clock)
    with lease.renewal():
        clock.now += 20  # a renewal that took 20 s to return
    assert lease.deadline() == pytest.approx(100 + 30 - 3)
    lease.check("write")  # 120 < 127
    clock.now = 126.9
    lease.check("write")
    clock.now = 127.0
    with pytest.raises(LeaseDeadlineError, match=r"^consumer 'c': the lease could not be renewed in time") as info:
        lease.check("chunk's sink write")
    assert isinstance(info.value, TransientError)
    assert "\n" not in str(info.value) and "before the chunk's sink write" in str(info.value)


def test_a_renewal_that_fails_or_hangs_moves_nothing() -> None:
    clock = Clock()
    lease = LeaseClock("c", 6, clock)
    with lease.renewal():
        pass
    clock.now += 3
    with pytest.raises(OSError), lease.renewal():
        raise OSError("store cut off")
    assert lease.deadline() == pytest.approx(105.0)
    assert lease.due()
    clock.now = 105.0
    with pytest.raises(LeaseDeadlineError):
        lease.check("write")


def test_renewal_is_due_at_a_third_of_the_ttl_and_the_deadline_only_moves_forward() -> None:
    clock = Clock()
    lease = LeaseClock("c", 30, clock)
    assert lease.due() and lease.deadline() is None
    with pytest.raises(LeaseDeadlineError, match="never"):
        lease.check("write")  # no lease taken: nothing may be written
    with lease.renewal():
        pass
    clock.now += 10
    assert not lease.due()
    clock.now += 0.1
    assert lease.due()
    # two threads renewing (a replica's beat and the cycle): the older send time returns last
    older = lease.renewal()
    older.__enter__()
    clock.now += 1
    with lease.renewal():
        pass
    newest = lease.deadline()
    older.__exit__(None, None, None)
    assert lease.deadline() == newest
    lease.released()
    assert lease.deadline() is None and lease.due()
