"""The manifest cache across plans (serve cycles) and parallel manifest reading, counted in real file opens."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from icetail.kernel.lru import LRU
from icetail.monitor.planning.lineage import snapshots_between
from icetail.monitor.planning.planner import Planner
from tests.support.small_table import SCHEMA, SmallTable


class CountingFileIO(PyArrowFileIO):
    """A real local FileIO that counts the files opened for reading, by path."""

    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__(properties)
        self.opened: Counter[str] = Counter()

    def new_input(self, location: str) -> Any:
        self.opened[location] += 1
        return super().new_input(location)

    def manifests_opened(self) -> Counter[str]:
        """Opened manifests (not manifest lists: those are `snap-*.avro`)."""
        return Counter({p: n for p, n in self.opened.items() if p.endswith(".avro") and "/snap-" not in p})


def _counted(table: Table) -> tuple[Table, CountingFileIO]:
    io = CountingFileIO(dict(table.io.properties))
    return Table(table.name(), table.metadata, table.metadata_location, io, table.catalog), io


def _grown(small_table: SmallTable, appends: int) -> Table:
    """The small table (2 appends, a copy-on-write delete) with `appends` more one-row appends."""
    table = small_table.load()
    for i in range(appends):
        table.append(pa.table({"id": [100 + i], "v": [f"n{i}"]}, SCHEMA))
    return small_table.load()


def test_cache_is_reused_across_cycles_and_a_new_snapshot_reads_only_its_manifest(small_table: SmallTable) -> None:
    table, io = _counted(_grown(small_table, 4))
    planner = Planner(table)
    first = planner.plan(None, None)
    every = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
    opened = io.manifests_opened()
    assert set(opened) <= every and max(opened.values()) == 1  # each manifest read at most once
    assert first.manifests_read == len(opened)

    io.opened.clear()
    planner.refresh(table)  # the next serve cycle, nothing new: every manifest comes from the cache
    again = planner.plan(None, None)
    assert again.manifests_read == 0 and io.manifests_opened() == Counter()
    assert replace(again, manifests_read=first.manifests_read) == first

    head = table.metadata.current_snapshot_id
    _grown(small_table, 1)
    newer, _ = _counted(small_table.load())
    planner.refresh(Table(newer.name(), newer.metadata, newer.metadata_location, io, newer.catalog))
    io.opened.clear()
    plan = planner.plan(head, None)
    new_snapshot = newer.current_snapshot()
    assert new_snapshot is not None
    own = [m.manifest_path for m in new_snapshot.manifests(newer.io) if m.added_snapshot_id == new_snapshot.snapshot_id]
    assert len(own) == 1 and plan.manifests_read == 1
    assert io.manifests_opened() == Counter({own[0]: 1})  # not one manifest of the history before it
    assert io.opened[new_snapshot.manifest_list] == 1


def test_a_cold_plan_of_one_new_snapshot_opens_only_its_list_and_manifest(small_table: SmallTable) -> None:
    table, io = _counted(_grown(small_table, 6))
    chain = snapshots_between(table.metadata, None, table.metadata.current_snapshot_id)
    plan = Planner(table).plan(chain[-2].snapshot_id, chain[-1].snapshot_id)
    assert [t.data_file.record_count for t in plan.tasks] == [1]
    own = [m.manifest_path for m in chain[-1].manifests(table.io) if m.added_snapshot_id == chain[-1].snapshot_id]
    assert set(io.opened) == {chain[-1].manifest_list, *own}
    assert len(chain[-1].manifests(table.io)) > 5  # while its list names every manifest of the history


def test_the_cache_is_bounded_by_entries(small_table: SmallTable) -> None:
    table, io = _counted(_grown(small_table, 6))
    planner = Planner(table, manifest_cache_entries=2)
    first = planner.plan(None, None)
    assert planner._manifests.cached_entries <= 2  # noqa: SLF001 - the bound under test
    read_first = sum(io.manifests_opened().values())
    io.opened.clear()
    again = planner.plan(None, None)  # the evicted manifests are read again, the same plan
    assert replace(again, manifests_read=first.manifests_read) == first
    assert again.manifests_read == sum(io.manifests_opened().values()) >= read_first - 2
    unbounded = Planner(table)
    unbounded.plan(None, None)
    assert unbounded._manifests.cached_entries > 2  # noqa: SLF001


def test_parallel_reading_gives_the_serial_plan(small_table: SmallTable) -> None:
    table = _grown(small_table, 8)
    head = table.metadata.current_snapshot_id
    chain = snapshots_between(table.metadata, None, head)
    for start in (None, chain[1].snapshot_id, chain[-2].snapshot_id):
        serial = Planner(table, planning_threads=1).plan(start, head)
        assert Planner(table, planning_threads=4).plan(start, head) == serial
        assert Planner(table, planning_threads=3, manifest_cache_entries=0).plan(start, head) == serial
    assert Planner(table, planning_threads=4).plan_full() == Planner(table, planning_threads=1).plan_full()
    assert {c.operation for c in Planner(table, planning_threads=4).plan(None, head).commits} >= {"append", "overwrite"}


def test_weighted_lru_drops_the_oldest_until_under_the_bound() -> None:
    cache: LRU[str, tuple[int, ...]] = LRU(10, weigh=len)
    cache.put("a", (1,) * 4)
    cache.put("b", (1,) * 4)
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", (1,) * 4)
    assert "b" not in cache and "a" in cache and "c" in cache and cache.weight == 8
    cache.put("huge", (1,) * 11)  # heavier than the bound: not kept, nothing dropped for it
    assert "huge" not in cache and cache.weight == 8
    cache.put("a", (1,))  # replacing re-weighs
    assert cache.weight == 5 and len(cache) == 2


def test_planners_that_share_read_each_manifest_once_for_the_process(small_table: SmallTable) -> None:
    """`serve`'s planners (one per table) share one cache, so its bound is the process's: a second
    planner finds what the first decoded, and together they hold no more than the bound. A planner
    with a row filter keeps its own (its pruning is collected as manifests are decoded)."""
    from icetail.monitor.planning.manifests import shared_manifest_cache

    table, io = _counted(_grown(small_table, 4))
    bound = 1_000_003  # a bound of this test's own: another test's shared cache is another cache
    first = Planner(table, manifest_cache_entries=bound, share_manifest_cache=True).plan(None, None)
    assert first.manifests_read > 0
    io.opened.clear()
    second = Planner(table, manifest_cache_entries=bound, share_manifest_cache=True).plan(None, None)
    assert second.manifests_read == 0 and io.manifests_opened() == Counter()
    assert replace(second, manifests_read=first.manifests_read) == first
    assert 0 < shared_manifest_cache(bound).weight <= bound
    filtered = Planner(table, manifest_cache_entries=bound, share_manifest_cache=True, row_filter="id >= 100")
    assert filtered.plan(None, None).manifests_read > 0  # its own cache: decoded (and pruned) again
    alone = Planner(table, manifest_cache_entries=bound).plan(None, None)
    assert alone.manifests_read == first.manifests_read  # not shared: a cache of its own


def test_a_shared_cache_keeps_its_bound_across_planners(small_table: SmallTable) -> None:
    from icetail.monitor.planning.manifests import shared_manifest_cache

    table, _ = _counted(_grown(small_table, 6))
    for _ in range(3):
        Planner(table, manifest_cache_entries=3, share_manifest_cache=True).plan(None, None)
    assert shared_manifest_cache(3).entries.weight <= 3


def test_serve_exports_what_the_shared_cache_holds(small_table: SmallTable) -> None:
    """`icetail_manifest_cache_entries` follows the shared cache, so a soak can tell a filling cache
    from a leak (R34 attributed the driver's growth by arithmetic only)."""
    from prometheus_client import CollectorRegistry

    from icetail.monitor.planning.manifests import shared_manifest_cache, shared_manifest_cache_weight
    from icetail.monitor.service.metrics import Metrics

    registry = CollectorRegistry()
    Metrics.create(registry)
    table, _ = _counted(_grown(small_table, 3))
    bound = 1_000_007  # this test's own shared cache
    before = registry.get_sample_value("icetail_manifest_cache_entries")
    assert before == shared_manifest_cache_weight()
    Planner(table, manifest_cache_entries=bound, share_manifest_cache=True).plan(None, None)
    held = shared_manifest_cache(bound).weight
    assert held > 0
    assert registry.get_sample_value("icetail_manifest_cache_entries") == before + held
