"""Integer sets as sorted arrays (reader/split/sorted_sets.py) agree with numpy's set routines."""

from __future__ import annotations

import numpy as np
import pytest

from icetail.reader.split.sorted_sets import in_sorted, sorted_unique


@pytest.mark.parametrize("high", [3, 1000, 2**62])  # duplicates galore, some, almost none
def test_sorted_unique_and_membership_match_numpy(high: int) -> None:
    rng = np.random.default_rng(high % 1000)
    values = rng.integers(-high, high, 5000, dtype=np.int64)
    probes = np.r_[values[:100], rng.integers(-high, high, 500, dtype=np.int64)]
    distinct = sorted_unique(values)
    assert np.array_equal(distinct, np.unique(values))
    assert np.array_equal(in_sorted(probes, distinct), np.isin(probes, values))


def test_empty_sets() -> None:
    empty = np.empty(0, dtype=np.int64)
    assert len(sorted_unique(empty)) == 0
    assert not in_sorted(np.array([1, 2], dtype=np.int64), empty).any()
