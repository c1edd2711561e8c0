"""Randomized differential test: icetail's changes against the Java reader, snapshot by snapshot.

For every workload configuration a seeded mix of snapshots is written by Java, then
`icetail.monitor.engine.api.read_changes` is checked over the whole history and over random sub-ranges
(`tests/support/oracle.py` states the invariant), read by Spark tasks and in process (both engines
must also agree row for row). More seeds: ICETAIL_DIFF_SEEDS="1,2,3".
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.engines import changes_by_engine, engine_problems
from tests.support.oracle import check_changes
from tests.support.workloads import COW, MIXED, MODES, MOR, Workload

SEEDS = [int(s) for s in os.environ.get("ICETAIL_DIFF_SEEDS", "1").split(",") if s.strip()]

CONFIGS = [
    pytest.param(2, False, MOR, id="v2-unpartitioned-mor"),
    pytest.param(2, True, MOR, id="v2-partitioned-mor"),
    pytest.param(2, True, COW, id="v2-partitioned-cow"),
    pytest.param(2, False, MIXED, id="v2-unpartitioned-mixed"),
    pytest.param(3, False, MOR, id="v3-unpartitioned-dv"),
    pytest.param(3, True, MIXED, id="v3-partitioned-mixed"),
]


def _sub_ranges(ids: list[int], rng: random.Random, count: int = 2) -> list[tuple[int | None, int | None]]:
    """(from_exclusive, to_inclusive) pairs on the ancestry: one single snapshot, others random."""
    out: list[tuple[int | None, int | None]] = []
    k = rng.randrange(1, len(ids))
    out.append((ids[k - 1], ids[k]))
    for _ in range(count - 1):
        a, b = sorted(rng.sample(range(-1, len(ids)), 2))
        out.append((ids[a] if a >= 0 else None, ids[b]))
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("format_version", "partitioned", "mode"), CONFIGS)
def test_workload_changes_match_java(catalog, format_version, partitioned, mode, seed) -> None:
    from icetail.monitor.engine.api import read_changes

    config_seed = seed * 1000 + format_version * 100 + partitioned * 10 + MODES.index(mode)
    w = Workload(catalog, "t", seed=config_seed, steps=8, format_version=format_version,
                 partitioned=partitioned, mode=mode)
    w.run()
    table = catalog.load_table("t")
    ids = catalog.snapshot_ids("t")
    problems: list[str] = []

    def check(from_id: int | None, to_id: int | None) -> None:
        try:
            outputs = changes_by_engine(read_changes, table, from_id, to_id)
        except Exception as exc:  # report every range, not just the first failure
            problems.append(f"read_changes({from_id}, {to_id}) raised {type(exc).__name__}: {exc}")
            return
        for engine, out in outputs.items():
            problems.extend(engine_problems(engine, check_changes(out, catalog, "t", from_id, to_id)))

    check(None, None)
    for from_id, to_id in _sub_ranges(ids, random.Random(config_seed)):
        check(from_id, to_id)
    assert not problems, "\n".join(problems) + "\n" + w.describe()
