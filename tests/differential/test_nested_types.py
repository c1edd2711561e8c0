"""Differential test on nested and less common types: structs, lists, maps at several levels.

The Java reference writes a seeded `NestedWorkload` (every primitive Spark writes, NULLs and
empty collections at every level, nested schema evolution, equality deletes keyed on a field
inside a struct); icetail's changes are checked against Java's reads over the whole history,
every snapshot on its own and random sub-ranges (`tests/support/oracle.py`).
"""

from __future__ import annotations

import random

import pytest

from tests.differential.test_workloads import SEEDS, _sub_ranges
from tests.support.nested_workload import NestedWorkload
from tests.support.oracle import check_changes
from tests.support.workloads import COW, MIXED, MODES, MOR

CONFIGS = [
    pytest.param(2, True, MOR, id="v2-partitioned-mor"),
    pytest.param(2, False, COW, id="v2-unpartitioned-cow"),
    pytest.param(3, False, MIXED, id="v3-unpartitioned-mixed"),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("format_version", "partitioned", "mode"), CONFIGS)
def test_nested_workload_changes_match_java(catalog, format_version, partitioned, mode, seed) -> None:
    from icetail.monitor.engine.api import read_changes

    config_seed = seed * 1000 + format_version * 100 + partitioned * 10 + MODES.index(mode) + 7
    w = NestedWorkload(catalog, "t", seed=config_seed, steps=8, format_version=format_version,
                       partitioned=partitioned, mode=mode, partition_evolution=False)
    w.run()
    table = catalog.load_table("t")
    ids = catalog.snapshot_ids("t")
    problems: list[str] = []

    def check(from_id: int | None, to_id: int | None) -> None:
        try:
            out = read_changes(table, from_id, to_id)
        except Exception as exc:  # report every range, not just the first failure
            problems.append(f"read_changes({from_id}, {to_id}) raised {type(exc).__name__}: {exc}")
            return
        problems.extend(check_changes(out, catalog, "t", from_id, to_id))

    check(None, None)
    for parent, snapshot in zip([None, *ids[:-1]], ids, strict=True):
        check(parent, snapshot)
    for from_id, to_id in _sub_ranges(ids, random.Random(config_seed)):
        check(from_id, to_id)
    assert not problems, "\n".join(problems) + "\n" + w.describe()
