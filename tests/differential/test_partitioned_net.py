"""`run --net` and `changes --net` folded in partitions by Spark tasks equal the driver fold, on
Java-written tables.

Java Iceberg (Spark 3.5) writes the histories of tests/differential/test_partitioned_reconcile.py:
copy-on-write and merge-on-read UPDATE, DELETE and MERGE, a rewrite that changes nothing
(carry-overs), a key change, INSERT OVERWRITE, rows duplicated so that cancellation is a
multiset one; on v3 tables (row lineage) the lineage workload too (rows updated twice, re-keyed,
compacted). Each history is delivered by `icetail run --net` in batches of a few snapshots,
folded whole in the driver and in partitions of a few hundred bytes (reader/changes/net_shuffle.py):
the sinks must hold the same rows (multisets of full rows, stamps included), and the net rows
of all batches replayed onto the empty table give Java's rows at the end. On v3, an INSERT
OVERWRITE gives rows changed earlier in the batch new row ids (lost lineage): that batch is
folded in the driver (NetFoldNotExact), the others in four stages.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.differential.test_partitioned_reconcile import _statements
from tests.support.catalogs import catalogs_in_process
from tests.support.compare import diff_report, row_multiset
from tests.support.javaref import spark_df_to_arrow
from tests.support.lineage_workload import STATEMENTS as LINEAGE_STATEMENTS
from tests.support.lineage_workload import create_table, tuples
from tests.support.workloads import COW, MOR, table_properties

pytestmark = pytest.mark.java

TINY = 2000  # estimated bytes per partition: every batch with rows is cut in several (500: 3x the tasks, no other path)
DATA = ("id", "p", "v", "d")
PER_BATCH = 3


def _delivered(
    catalog: Any, root: Path, partition_bytes: int, per_batch: int | None = PER_BATCH, **options: Any
) -> tuple[pa.Table, int]:
    """(net rows in the sink, chunks delivered) after `run --net` delivered the whole history."""
    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.engine.pipeline import Pipeline

    consumer = f"net-{partition_bytes}"
    (root / consumer).mkdir(parents=True, exist_ok=True)
    config = PipelineConfig(
        catalog.name,
        "ns.t",
        f"sqlite:///{root}/{consumer}/state.db",
        f"parquet://{root}/{consumer}/sink",
        consumer=consumer,
        chunk_rows=200,
        net=True,
        max_snapshots_per_batch=per_batch,
        reconcile_partition_bytes=partition_bytes,
        **options,
    )
    with catalogs_in_process(catalog), Pipeline(config, spark=catalog.spark) as pipeline:
        outcomes = pipeline.run()
    assert outcomes and all(o.completed for o in outcomes)
    return pq.read_table(root / consumer / "sink"), sum(o.chunks for o in outcomes)


def _replayed(net: pa.Table) -> Counter[tuple[Any, ...]]:
    """The rows at the end: the empty table, then every batch's net rows."""
    kinds = net.column("_change_type").to_pylist()
    rows = tuples(net, DATA)
    added = Counter(r for r, k in zip(rows, kinds, strict=True) if k in ("INSERT", "UPDATE_AFTER"))
    removed = Counter(r for r, k in zip(rows, kinds, strict=True) if k in ("DELETE", "UPDATE_BEFORE"))
    assert not removed - added, f"removed rows never added: {removed - added}"
    return added - removed


def _api_net(catalog: Any, partition_bytes: int, seen: list[bool], **options: Any) -> pa.Table:
    """`iter_changes(net=True)` of the whole history (so `changes --net` and `read_changes(net=True)`)."""
    from icetail.monitor.engine.api import iter_changes, plan_range

    table = catalog.load_table("t")
    batches = iter_changes(
        table,
        plan_range(table),
        net=True,
        spark=catalog.spark,
        chunk_rows=200,
        on_chunk=lambda chunk: seen.append(chunk.batch is None),
        reconcile_partition_bytes=partition_bytes,
        **options,
    )
    return pa.Table.from_batches(list(batches))


def _check_api_both_ways(
    catalog: Any, caplog: pytest.LogCaptureFixture, *, partitioned: bool = True, **options: Any
) -> None:
    """The API's net changes over the whole history, folded by Spark tasks in partitions, equal the
    driver's fold and give Java's rows at the end. The shuffle's read chunks reach `on_chunk`
    without rows (their rows go to the partitions), which shows the partitioned fold ran;
    `partitioned=False`: the range lost lineage, so it is folded in the driver instead."""
    options.pop("per_batch", None)
    driver = _api_net(catalog, 0, [], **options)
    seen: list[bool] = []
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="icetail.changes"):
        folded = _api_net(catalog, TINY, seen, **options)
    assert any(seen) == partitioned, seen
    assert ("folded in the driver" in caplog.text) == (not partitioned), caplog.text
    expected, got = row_multiset(driver, driver.schema), row_multiset(folded, driver.schema)
    assert expected == got, diff_report(expected, got)
    end = spark_df_to_arrow(catalog.sql(f"SELECT {', '.join(DATA)} FROM {{cat}}.ns.t"))
    assert _replayed(folded) == Counter(tuples(end, DATA))


def _check_both_ways(
    catalog: Any, root: Path, caplog: pytest.LogCaptureFixture, *, partitioned: bool = True, **options: Any
) -> pa.Table:
    """The partitioned delivery against the driver fold and Java's rows at the end; returns the rows.
    `partitioned`: whether some batch folds in partitions (else every one falls back to the driver)."""
    driver, driver_chunks = _delivered(catalog, root, 0, **options)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="icetail.pipeline"):
        folded, chunks = _delivered(catalog, root, TINY, **options)
    if partitioned:
        assert chunks > driver_chunks + 10, (chunks, driver_chunks)  # the partitioned fold really ran
    else:
        assert chunks == driver_chunks and "folded in the driver" in caplog.text, (chunks, driver_chunks)
    expected, got = row_multiset(driver, driver.schema), row_multiset(folded, driver.schema)
    assert expected == got, diff_report(expected, got)
    end = spark_df_to_arrow(catalog.sql(f"SELECT {', '.join(DATA)} FROM {{cat}}.ns.t"))
    assert _replayed(folded) == Counter(tuples(end, DATA))
    return folded


@pytest.mark.parametrize("identifiers", [["id"], None], ids=["identifiers", "no-identifiers"])
@pytest.mark.parametrize("mode", [COW, MOR])
def test_v2_partitioned_net_equals_the_driver_fold(catalog, tmp_path, caplog, mode, identifiers) -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, mode).items())
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string, d double) USING iceberg TBLPROPERTIES ({props})"
    )
    for statement in _statements(duplicates=not identifiers):
        catalog.sql(statement)
    identifier_columns = tuple(identifiers) if identifiers else None
    _check_api_both_ways(catalog, caplog, identifier_columns=identifier_columns)
    rows = _check_both_ways(catalog, tmp_path, caplog, identifier_columns=identifier_columns)
    kinds = Counter(rows.column("_change_type").to_pylist())
    assert kinds["UPDATE_BEFORE" if identifiers else "DELETE"] > 10, kinds
    assert "folded in the driver" not in caplog.text  # without lineage every batch folds in partitions


@pytest.mark.parametrize("mode", [COW, MOR])
def test_v3_row_lineage_partitioned_net_equals_the_driver_fold(catalog, tmp_path, caplog, mode) -> None:
    create_table(catalog, mode)
    statements = _statements(duplicates=True)
    for statement in [*statements[:3], *LINEAGE_STATEMENTS[1:]]:
        catalog.sql(statement)
    _check_api_both_ways(catalog, caplog, with_row_lineage=True)  # before the overwrite: four stages
    for statement in [statements[-1], LINEAGE_STATEMENTS[1]]:
        catalog.sql(statement)
    rows = _check_both_ways(catalog, tmp_path / "batches", caplog, with_row_lineage=True)
    assert "UPDATE_BEFORE" in rows.column("_change_type").to_pylist() and "_row_id" in rows.column_names
    # one batch of the whole history: the INSERT OVERWRITE gives rows inserted in it new row ids
    _check_api_both_ways(catalog, caplog, partitioned=False, with_row_lineage=True)
    rows = _check_both_ways(catalog, tmp_path / "whole", caplog, partitioned=False, per_batch=None)
    assert "UPDATE_BEFORE" not in rows.column("_change_type").to_pylist() and "_row_id" not in rows.column_names
    assert caplog.text.count("folded in the driver") == 1, caplog.text
