"""Snapshots reconciled in partitions by Spark tasks deliver what reconciling them whole delivers.

Java Iceberg (Spark 3.5) writes the tables: copy-on-write UPDATE, DELETE and MERGE, merge-on-read
updates, INSERT OVERWRITE, rows duplicated so that carry-over cancellation is a multiset one,
and on v3 tables (row lineage) an UPDATE that changes the key. `icetail run` delivers each
history twice: with a partition size so small that every snapshot to reconcile is shuffled in
several partitions (reader/changes/shuffle.py), through a staging sink (parquet: the tasks write the rows)
and a driver-written one (jsonl: the rows come back), and whole, in the driver. Both must equal
`read_changes` (the in-driver path) as multisets of full rows, and, on copy-on-write tables
with identifier columns, Java's `create_changelog_view(compute_updates => true)`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.catalogs import catalogs_in_process
from tests.support.compare import diff_report, row_multiset
from tests.support.lineage_workload import STATEMENTS as LINEAGE_STATEMENTS
from tests.support.lineage_workload import create_table
from tests.support.oracle import row_tuples
from tests.support.workloads import COW, MOR, table_properties

TINY_PARTITIONS = 1500  # estimated bytes per partition: a few partitions per snapshot here
KEYS = ("id", "p", "v", "d", "_change_type", "_change_ordinal", "_commit_snapshot_id")


def _statements(*, duplicates: bool) -> list[str]:
    """Three files of 300 rows (with `duplicates`, every 25th row twice: carry-over cancellation is a
    multiset one), then every kind of snapshot that deletes and inserts."""
    writes = []
    for file in range(3):
        ids = [i for i in range(file * 300, file * 300 + 300) for _ in range(2 if duplicates and i % 25 == 0 else 1)]
        rows = ", ".join(f"({i}L, {i % 3}, 'v{i % 7}', {i % 5}.5D)" for i in ids)
        writes.append(f"INSERT INTO {{cat}}.ns.t VALUES {rows}")
    return [
        *writes,
        "UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id % 10 = 3",
        "DELETE FROM {cat}.ns.t WHERE id % 17 = 4",
        "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (5L, 'm', 1), (900L, 'new', 1) "
        "AS s(id, v, op)) s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v, t.d = t.d + 1D "
        "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
        "UPDATE {cat}.ns.t SET v = v WHERE id < 40",  # rewritten, unchanged: carry-overs only
        "UPDATE {cat}.ns.t SET id = id + 1000 WHERE id % 50 = 7",  # the key changes
        "INSERT OVERWRITE {cat}.ns.t SELECT id, p, CASE WHEN id % 9 = 0 THEN 'o' ELSE v END, d FROM {cat}.ns.t",
    ]


def _config(catalog: Any, root: Path, sink: str, consumer: str, **options: Any) -> Any:
    from icetail.monitor.engine.config import PipelineConfig

    root.mkdir(parents=True, exist_ok=True)  # a SQLite store's folder must exist (it is never created)
    return PipelineConfig(
        catalog.name, "ns.t", f"sqlite:///{root}/state.db", sink, consumer=consumer, chunk_rows=200, **options
    )


def _sink_rows(sink: str) -> pa.Table:
    path = sink.split("://", 1)[1]
    if sink.startswith("parquet"):
        return pq.read_table(path)
    return pa.Table.from_pylist([json.loads(line) for line in Path(path).read_text().splitlines()])


def _delivered(catalog: Any, root: Path, kind: str, partition_bytes: int, **options: Any) -> tuple[pa.Table, int]:
    """(rows in the sink, chunks delivered) after `icetail run` delivered the whole history."""
    from icetail.monitor.engine.pipeline import Pipeline

    consumer = f"{kind}-{partition_bytes}"
    sink = f"parquet://{root}/{consumer}" if kind == "parquet" else f"jsonl://{root}/{consumer}.jsonl"
    config = _config(catalog, root, sink, consumer, reconcile_partition_bytes=partition_bytes, **options)
    with catalogs_in_process(catalog), Pipeline(config, spark=catalog.spark) as pipeline:
        outcomes = pipeline.run()
    return _sink_rows(sink), sum(o.chunks for o in outcomes)


def _check_both_ways(catalog: Any, root: Path, **options: Any) -> pa.Table:
    """`read_changes` (whole, in the driver) against the partitioned deliveries; returns it."""
    from icetail.monitor.engine.api import read_changes

    with_lineage = options.get("with_row_lineage", False)
    expected = read_changes(
        catalog.load_table("t"),
        identifier_columns=options.get("identifier_columns"),
        with_row_lineage=with_lineage,
        reconcile_partition_bytes=0,
    )
    assert {"DELETE", "INSERT"} <= set(expected.column("_change_type").to_pylist())
    _check_api_partitioned(catalog, expected, **options)
    _, whole_chunks = _delivered(catalog, root, "parquet", 0, **options)
    for kind in ("parquet", "jsonl"):
        got, chunks = _delivered(catalog, root, kind, TINY_PARTITIONS, **options)
        assert chunks > whole_chunks + 20, (kind, chunks, whole_chunks)  # the partitioned path really ran
        if kind == "parquet":  # full rows, every column
            a, b = row_multiset(expected, expected.schema), row_multiset(got, expected.schema)
        else:  # JSON text: the columns that identify a change
            columns = KEYS + (("_row_id", "_last_updated_sequence_number") if with_lineage else ())
            a, b = Counter(row_tuples(expected, columns)), Counter(row_tuples(got, columns))
        assert a == b, f"{kind} sink, partitioned:\n{diff_report(a, b)}"
    return expected


def _check_api_partitioned(catalog: Any, expected: pa.Table, **options: Any) -> None:
    """The Python API (and `icetail changes`) reconciles big snapshots in partitions too: the same
    rows, snapshot by snapshot in commit order. Chunks read by the shuffle reach `on_chunk` without
    rows (their rows go to the partitions), which shows the partitioned path ran."""
    from icetail.monitor.engine.api import iter_changes, plan_range

    table = catalog.load_table("t")
    seen: list[bool] = []
    batches = iter_changes(
        table,
        plan_range(table),
        identifier_columns=options.get("identifier_columns"),
        with_row_lineage=options.get("with_row_lineage", False),
        spark=catalog.spark,
        on_chunk=lambda chunk: seen.append(chunk.batch is None),
        reconcile_partition_bytes=TINY_PARTITIONS,
    )
    got = pa.Table.from_batches(list(batches), schema=expected.schema)
    assert any(seen), "no snapshot was reconciled in partitions"
    assert row_multiset(got, expected.schema) == row_multiset(expected, expected.schema)
    order = got.column("_change_ordinal").to_pylist()
    assert order == sorted(order), "snapshots must leave in commit order"


@pytest.mark.parametrize("identifiers", [["id"], None], ids=["identifiers", "no-identifiers"])
@pytest.mark.parametrize("mode", [COW, MOR])
def test_v2_partitioned_equals_whole_and_java(catalog, tmp_path, mode, identifiers) -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, mode).items())
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint, p int, v string, d double) USING iceberg TBLPROPERTIES ({props})"
    )
    for statement in _statements(duplicates=not identifiers):  # Java refuses duplicate identifier values
        catalog.sql(statement)
    expected = _check_both_ways(catalog, tmp_path, identifier_columns=tuple(identifiers) if identifiers else None)
    kinds = Counter(expected.column("_change_type").to_pylist())
    if identifiers:
        assert kinds["UPDATE_BEFORE"] > 10, kinds
    if mode == COW and identifiers:  # Java's changelog reads no delete files: copy-on-write only
        java = catalog.java_changelog("t", identifier_columns=identifiers)
        assert Counter(row_tuples(expected, KEYS)) == Counter(row_tuples(java, KEYS))


@pytest.mark.parametrize("mode", [COW, MOR])
def test_v3_row_lineage_partitioned_in_two_phases(catalog, tmp_path, mode) -> None:
    """Phase 1 by `_row_id` settles lineage pairs (a changed key included), phase 2 the rest by content."""
    create_table(catalog, mode)
    for statement in [*_statements(duplicates=True)[:3], *LINEAGE_STATEMENTS[1:]]:
        catalog.sql(statement)
    for with_lineage in (True, False):
        expected = _check_both_ways(catalog, tmp_path / str(with_lineage), with_row_lineage=with_lineage)
        assert "UPDATE_BEFORE" in expected.column("_change_type").to_pylist()
