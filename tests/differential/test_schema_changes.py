"""Schema changes as events: Java Iceberg evolves a table between writes (ADD COLUMN, RENAME COLUMN,
ALTER COLUMN TYPE int -> bigint, DROP COLUMN) and icetail follows it into a parquet sink and an
Iceberg sink, batch by batch.

Checked after every batch, against Java: the batch holds exactly one run of snapshots that Java
wrote with one schema id (and ends before the next schema), its rows are what Java's reader sees
at each of its snapshots (projected onto that schema), `_schema_id` is Java's snapshot schema id,
the parquet files carry that schema (names and Iceberg field ids), and the Iceberg sink table
followed by field id: the added column added, the renamed column renamed (same sink field id),
the widened type widened, the dropped column kept and null in later rows.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import BatchOutcome, Pipeline
from icetail.reader.split.metadata_columns import CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, METADATA_COLUMNS, SCHEMA_ID
from icetail.sinks.iceberg.evolution import SOURCE_FIELD_IDS
from tests.support.engines import same_rows
from tests.support.oracle import assert_changes_match, field_id_of, row_tuples
from tests.support.workloads import MOR, table_properties

SINK_IDENT = "sinkns.changes"


def _write_evolving_table(catalog: Any) -> list[int]:
    """Nine snapshots over five schemas; returns the snapshot ids, oldest first."""
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, MOR).items())
    columns = "id bigint, n int, v string, x string"
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t ({columns}) USING iceberg TBLPROPERTIES ({props})")
    for stmt in (
        "INSERT INTO {cat}.ns.t VALUES (1L, 10, 'a', 'x1'), (2L, 20, 'b', 'x2')",  # schema 0
        "INSERT INTO {cat}.ns.t VALUES (3L, 30, 'c', 'x3')",
        "ALTER TABLE {cat}.ns.t ADD COLUMN e bigint",  # schema 1
        "INSERT INTO {cat}.ns.t VALUES (4L, 40, 'd', 'x4', 400L)",
        "UPDATE {cat}.ns.t SET e = 100L WHERE id = 1",  # merge-on-read: position deletes + new rows
        "ALTER TABLE {cat}.ns.t RENAME COLUMN v TO w",  # schema 2
        "INSERT INTO {cat}.ns.t VALUES (5L, 50, 'e', 'x5', 500L)",
        "ALTER TABLE {cat}.ns.t ALTER COLUMN n TYPE bigint",  # schema 3
        "INSERT INTO {cat}.ns.t VALUES (6L, 6000000000L, 'f', 'x6', 600L)",
        "DELETE FROM {cat}.ns.t WHERE id = 2",
        "ALTER TABLE {cat}.ns.t DROP COLUMN x",  # schema 4
        "INSERT INTO {cat}.ns.t VALUES (7L, 70L, 'g', 700L)",
        "UPDATE {cat}.ns.t SET w = 'gg' WHERE id = 7",
    ):
        catalog.sql(stmt)
    return catalog.snapshot_ids("t")


def _java_schema_ids(catalog: Any, snapshot_ids: list[int]) -> dict[int, int]:
    """Each snapshot's schema id as Java's own Table API reports it."""
    java = catalog.java_table("t")
    return {s: int(java.snapshot(s).schemaId()) for s in snapshot_ids}


def _expected_runs(snapshot_ids: list[int], schema_ids: dict[int, int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for s in snapshot_ids:
        if runs and schema_ids[runs[-1][-1]] == schema_ids[s]:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def _config(catalog: Any, root: Path, consumer: str, sink_url: str) -> PipelineConfig:
    return PipelineConfig(
        catalog.name, "ns.t", f"sqlite:///{root}/state.db", sink_url, consumer=consumer, with_schema_id=True
    )


def _batch_rows(files: list[Path]) -> pa.Table:
    tables = [pq.read_table(f) for f in sorted(files)]
    return pa.concat_tables(tables)


def _check_batch_against_java(
    catalog: Any, outcome: BatchOutcome, rows: pa.Table, snapshot_ids: list[int], schema_ids: dict[int, int]
) -> None:
    assert set(rows.column(SCHEMA_ID).to_pylist()) == {outcome.schema_id}
    assert {schema_ids[s] for s in rows.column(COMMIT_SNAPSHOT_ID).to_pylist()} == {outcome.schema_id}
    # the oracle numbers ordinals from the range's start; the consumer's count from its own start
    before = snapshot_ids.index(outcome.from_snapshot_exclusive) + 1 if outcome.from_snapshot_exclusive else 0
    shifted = pc.subtract(rows.column(CHANGE_ORDINAL), pa.scalar(before, pa.int32()))
    rows = rows.set_column(rows.schema.get_field_index(CHANGE_ORDINAL), CHANGE_ORDINAL, shifted)
    assert_changes_match(
        rows.drop_columns([SCHEMA_ID]), catalog, "t", outcome.from_snapshot_exclusive, outcome.to_snapshot_inclusive
    )


def test_batches_follow_schema_changes_into_parquet_and_iceberg_sinks(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.set_env(monkeypatch)
    snapshot_ids = _write_evolving_table(catalog)
    schema_ids = _java_schema_ids(catalog, snapshot_ids)
    assert [schema_ids[s] for s in snapshot_ids] == [0, 0, 1, 1, 2, 3, 3, 4, 4]  # Java's own bookkeeping
    runs = _expected_runs(snapshot_ids, schema_ids)
    java_schemas = {s.schema_id: s for s in catalog.load_table("t").schemas().values()}

    sink_dir = tmp_path / "pq"
    parquet = _config(catalog, tmp_path, "pq", f"parquet://{sink_dir}")
    iceberg = _config(catalog, tmp_path, "ice", f"iceberg://{catalog.name}/{SINK_IDENT}")
    sink_ids: dict[str, int] = {}  # sink field id of each source column, by its first name
    with Pipeline(parquet, spark=spark) as pq_pipeline, Pipeline(iceberg, spark=spark) as ice_pipeline:
        for run in runs:
            seen = set(sink_dir.glob("*.parquet"))
            outcome = pq_pipeline.run_batch()
            assert outcome is not None and outcome.completed
            ice_outcome = ice_pipeline.run_batch()
            assert ice_outcome is not None and ice_outcome.schema_id == outcome.schema_id
            # one batch = one maximal run of snapshots Java wrote with one schema
            expected_from = snapshot_ids[snapshot_ids.index(run[0]) - 1] if run[0] != snapshot_ids[0] else None
            assert (outcome.from_snapshot_exclusive, outcome.to_snapshot_inclusive) == (expected_from, run[-1])
            assert outcome.schema_id == schema_ids[run[0]]
            schema = java_schemas[outcome.schema_id]

            # parquet: new files only, each with exactly the batch's schema, names and field ids
            files = sorted(set(sink_dir.glob("*.parquet")) - seen)
            assert files
            for f in files:
                physical = pq.read_schema(f)
                data = [fld for fld in physical if fld.name not in (*METADATA_COLUMNS, SCHEMA_ID)]
                assert [(fld.name, field_id_of(fld)) for fld in data] == [(c.name, c.field_id) for c in schema.fields]
                assert physical.names[len(data) :] == [*METADATA_COLUMNS, SCHEMA_ID]
            rows = _batch_rows(files)
            _check_batch_against_java(catalog, outcome, rows, snapshot_ids, schema_ids)

            # iceberg: the table followed by field id; this batch's rows are the parquet sink's
            sink_table = catalog.pyiceberg.load_table(SINK_IDENT)
            mapping = {int(k): v for k, v in json.loads(sink_table.properties[SOURCE_FIELD_IDS]).items()}
            for column in schema.fields:
                sink_field = sink_table.schema().find_field(mapping[column.field_id])
                assert sink_field.name == column.name and sink_field.field_type == column.field_type
                sink_ids.setdefault(str(column.field_id), sink_field.field_id)
                assert sink_ids[str(column.field_id)] == sink_field.field_id  # renamed in place, never re-added
            sink_rows = sink_table.scan().to_arrow()
            in_batch = sink_rows.filter(pc.is_in(sink_rows.column(COMMIT_SNAPSHOT_ID), pa.array(run, pa.int64())))
            names = [*[c.name for c in schema.fields], *METADATA_COLUMNS, SCHEMA_ID]
            assert Counter(row_tuples(in_batch, names)) == Counter(row_tuples(rows, names))
            for kept in set(sink_rows.column_names) - set(names):  # dropped or not yet added: null
                assert in_batch.column(kept).null_count == in_batch.num_rows, kept
        assert pq_pipeline.run_batch() is None and ice_pipeline.run_batch() is None

    final = catalog.pyiceberg.load_table(SINK_IDENT).schema()
    assert [f.name for f in final.fields] == ["id", "n", "w", "x", *METADATA_COLUMNS, SCHEMA_ID, "e"]
    assert str(final.find_field("n").field_type) == "long"


def test_changes_over_a_schema_change_keep_each_rows_schema_id(catalog: Any, spark: Any) -> None:
    """`icetail changes` (read_changes) over the whole history: rows on the newest schema, `_schema_id` per commit."""
    snapshot_ids = _write_evolving_table(catalog)
    schema_ids = _java_schema_ids(catalog, snapshot_ids)
    out = read_changes(catalog.load_table("t"), with_schema_id=True, spark=spark)
    assert out.column_names[-1] == SCHEMA_ID and out.schema.field(SCHEMA_ID).type == pa.int32()
    by_commit = set(zip(out.column(COMMIT_SNAPSHOT_ID).to_pylist(), out.column(SCHEMA_ID).to_pylist(), strict=True))
    assert by_commit == {(s, schema_ids[s]) for s in snapshot_ids}
    assert_changes_match(out.drop_columns([SCHEMA_ID]), catalog, "t")
    # the range from the first snapshot written with schema 2 on, without the column: as before
    plain = read_changes(catalog.load_table("t"), snapshot_ids[3], spark=spark)
    assert SCHEMA_ID not in plain.column_names
    assert_changes_match(plain, catalog, "t", snapshot_ids[3])
    # in process: the same rows, in the same order, on both ranges
    assert same_rows(read_changes(catalog.load_table("t"), with_schema_id=True, engine="local"), out)
    assert same_rows(read_changes(catalog.load_table("t"), snapshot_ids[3], engine="local"), plain)
