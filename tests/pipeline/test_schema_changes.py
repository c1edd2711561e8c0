"""Schema changes made with pyiceberg's `update_schema()` between appends, followed by `run`.

Each batch holds one schema (it ends before the first snapshot of a new one); the rows of every
batch are `read_changes` of its range (checked against Java in tests/differential); a crash in
the first batch after a schema change resumes exactly once, into a parquet or an Iceberg sink;
and a batch that the previous release wrote ahead across a schema change (no batch schema id,
split format 2) resumes exactly as that release would have finished it.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table
from pyiceberg.types import LongType

from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.planning.planner import Planner
from icetail.reader.split.metadata_columns import CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, METADATA_COLUMNS, SCHEMA_ID
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.iceberg.evolution import SOURCE_FIELD_IDS
from icetail.sinks.registry import open_sink
from icetail.state.checkpoint import BatchShape, Cursor, InflightBatch
from icetail.state.codec import VERSION_KEY
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.crash import assert_exactly_once_under_kills, kill_schedule
from tests.support.oracle import field_id_of, row_tuples
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import CrashingSink, SimulatedCrash, make_sink

TABLE = "ns.evolving"
SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("v", pa.string()), ("x", pa.string())])


def _rows(ids: range, schema: Any) -> pa.Table:
    """Rows for whatever columns the table has now (pyiceberg's append wants exactly its schema)."""
    values = {
        "id": list(ids),
        "n": [i * 10 for i in ids],
        "v": [f"v{i}" for i in ids],
        "w": [f"w{i}" for i in ids],
        "x": [f"x{i}" for i in ids],
        "e": [i * 100 for i in ids],
    }
    arrow = schema.as_arrow()
    return pa.table({f.name: pa.array(values[f.name], f.type) for f in arrow}, schema=arrow)


def build_evolving_table(cat: LocalCatalog) -> Table:
    """Eight appends over five schemas (add, rename, widen, drop), several row groups each."""
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, schema=SCHEMA, properties={"write.parquet.row-group-limit": "100"})
    batches = iter(range(0, 10_000, 300))

    def append() -> None:
        start = next(batches)
        table.append(_rows(range(start, start + 300), table.schema()))

    append()
    append()  # schema 0
    with table.update_schema() as update:
        update.add_column("e", LongType())
    append()
    append()  # schema 1
    with table.update_schema() as update:
        update.rename_column("v", "w")
    append()  # schema 2
    with table.update_schema() as update:
        update.update_column("n", LongType())
    append()  # schema 3
    with table.update_schema() as update:
        update.delete_column("x")
    append()
    append()  # schema 4
    return cat.load(TABLE)


def _schema_runs(table: Table) -> list[list[int]]:
    runs: list[list[int]] = []
    history = [table.metadata.snapshot_by_id(e.snapshot_id) for e in table.metadata.snapshot_log]
    for snapshot in history:
        assert snapshot is not None
        previous = table.metadata.snapshot_by_id(runs[-1][-1]) if runs else None
        if previous is not None and previous.schema_id == snapshot.schema_id:
            runs[-1].append(snapshot.snapshot_id)
        else:
            runs.append([snapshot.snapshot_id])
    return runs


def _config(cat: LocalCatalog, tmp_path: Path, sink_url: str, **options: Any) -> PipelineConfig:
    return PipelineConfig(cat.name, TABLE, f"sqlite:///{tmp_path}/state.db", sink_url, consumer="c", **options)


def _multiset(rows: pa.Table, names: list[str]) -> Counter[tuple[Any, ...]]:
    """Rows as a multiset; `_change_ordinal` left out (a consumer counts from its start, a range from 0)."""
    return Counter(row_tuples(rows, [n for n in names if n != CHANGE_ORDINAL]))


def _expected_by_batch(table: Table, ranges: list[tuple[int | None, int]], spark: Any) -> list[pa.Table]:
    return [read_changes(table, frm, to, spark=spark, with_schema_id=True) for frm, to in ranges]


@pytest.fixture
def evolving(tmp_path: Path, use_catalogs: Any) -> tuple[LocalCatalog, Table]:
    cat = new_catalog(tmp_path / "source", "evocat")
    table = build_evolving_table(cat)
    use_catalogs(cat)
    return cat, table


def test_each_batch_holds_one_schema_and_its_rows(evolving: Any, spark: Any, tmp_path: Path) -> None:
    cat, table = evolving
    runs = _schema_runs(table)
    assert [len(r) for r in runs] == [2, 2, 1, 1, 2]
    sink_dir = tmp_path / "sink"
    config = _config(cat, tmp_path, f"parquet://{sink_dir}", with_schema_id=True)
    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
        history = pipeline._store.history("c")
    assert [(o.from_snapshot_exclusive, o.to_snapshot_inclusive) for o in outcomes] == [
        (runs[i - 1][-1] if i else None, run[-1]) for i, run in enumerate(runs)
    ]
    assert [o.schema_id for o in outcomes] == [0, 1, 2, 3, 4]
    assert [h.shape.schema_id for h in reversed(history)] == [0, 1, 2, 3, 4]  # stored with the batch
    ranges = [(o.from_snapshot_exclusive, o.to_snapshot_inclusive) for o in outcomes]
    expected = _expected_by_batch(table, ranges, spark)
    for outcome, want in zip(outcomes, expected, strict=True):
        files = sorted(sink_dir.glob(f"*{outcome.batch_id}*.parquet"))
        schemas = {pq.read_schema(f) for f in files}
        assert len(schemas) == 1  # a file never mixes schemas, and a batch has one
        got = pa.concat_tables([pq.read_table(f) for f in files])
        names = got.column_names
        assert names == want.column_names and set(got.column(SCHEMA_ID).to_pylist()) == {outcome.schema_id}
        assert _multiset(got, names) == _multiset(want, names)


def test_status_and_outcome_name_the_schema(evolving: Any, spark: Any, tmp_path: Path) -> None:
    from icetail.monitor.cli.progress import describe
    from icetail.monitor.cli.status_cmd import status_of

    cat, _ = evolving
    config = _config(cat, tmp_path, f"parquet://{tmp_path / 'sink'}")
    with Pipeline(config, spark=spark) as pipeline:
        (outcome,) = pipeline.run(once=True)
        checkpoint = pipeline.checkpoint()
        last = pipeline._store.history("c", 1)[0]
    assert checkpoint is not None
    report = status_of(checkpoint, "sqlite:///state.db", with_table=False, last_batch=last)
    assert report["last_batch"]["schema_id"] == 0
    assert " schema 0" in describe(outcome)


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_a_crash_right_after_a_schema_change_resumes_exactly_once(
    evolving: Any, spark: Any, tmp_path: Path, kind: str
) -> None:
    cat, table = evolving
    if kind == "parquet":
        url = f"parquet://{tmp_path / 'sink'}"
    else:
        url = f"iceberg://{cat.name}/sinkns.changes"
    config = _config(cat, tmp_path, url, chunk_rows=150)
    first_batch_chunks = 2 * 300 // 100  # schema 0: two appends of 300 rows, chunks end at 100-row row groups
    # the process dies after the second chunk of the first batch with the new schema has landed in the sink
    crashing = CrashingSink(open_sink(url, consumer="c"), first_batch_chunks + 2, after_write=True)
    with Pipeline(config, sink=crashing, spark=spark) as pipeline, pytest.raises(SimulatedCrash):
        pipeline.run()
    with Pipeline(config, spark=spark) as pipeline:
        checkpoint = pipeline.checkpoint()
        assert checkpoint is not None and checkpoint.inflight is not None
        assert checkpoint.inflight.batch.shape.schema_id == 1
        outcomes = pipeline.run()
    assert outcomes[0].resumed and outcomes[0].schema_id == 1
    if kind == "parquet":
        files = sorted((tmp_path / "sink").glob("*.parquet"))
        got = pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
    else:
        sink_table = cat.load("sinkns.changes")
        got = sink_table.scan().to_arrow()
        sink_ids = {int(k): v for k, v in json.loads(sink_table.properties[SOURCE_FIELD_IDS]).items()}
    # exactly once: every batch's rows once, under the names of its own schema
    ranges: list[tuple[int | None, int]] = [(None, _schema_runs(table)[0][-1])]
    ranges += [(o.from_snapshot_exclusive, o.to_snapshot_inclusive) for o in outcomes]
    for (frm, to), want in zip(ranges, _expected_by_batch(table, ranges, spark), strict=True):
        commits = want.column(COMMIT_SNAPSHOT_ID).unique()
        in_range = got.filter(pa.compute.is_in(got.column(COMMIT_SNAPSHOT_ID), commits))
        names = [n for n in want.column_names if n != SCHEMA_ID]
        if kind == "iceberg":  # the sink holds earlier rows under the newest names: match by field id
            sink_schema = sink_table.schema()
            want = want.rename_columns([
                sink_schema.find_field(sink_ids[source_id]).name if (source_id := field_id_of(f)) else f.name
                for f in want.schema
            ])
            names = [n for n in want.column_names if n != SCHEMA_ID]
        assert _multiset(in_range, names) == _multiset(want, names), (frm, to)
    assert got.num_rows == sum(w.num_rows for w in _expected_by_batch(table, ranges, spark))


def _downgrade_to_schema_3(db: Path) -> None:
    """The store as the release before branches, net and schema ids wrote it: store schema 3, split format 2."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TABLE icetail_stopped_consumers")  # store schema 8
        conn.execute("DROP TABLE icetail_replicas")  # store schema 10
        conn.execute("ALTER TABLE icetail_consumers DROP COLUMN branch")  # store schema 4
        for name in ("icetail_inflight_batches", "icetail_history"):
            for column in ("net", "schema_id", "reconcile_partition_bytes", "net_partitioned"):  # store schemas 5-7, 9
                conn.execute(f"ALTER TABLE {name} DROP COLUMN {column}")
        for column in ("parts_done", "parts_key"):  # store schema 7
            conn.execute(f"ALTER TABLE icetail_inflight_splits DROP COLUMN {column}")
        for consumer, batch_id, split_id, text in conn.execute(
            "SELECT consumer, batch_id, split_id, split_json FROM icetail_inflight_splits"
        ).fetchall():
            raw = json.loads(text)
            raw[VERSION_KEY] = 2
            del raw["task"]["commit"]["schema_id"]
            assert raw["task"]["data_file"].pop("first_row_id") is None  # split format 4; no lineage here
            conn.execute(
                "UPDATE icetail_inflight_splits SET split_json = ? "
                "WHERE consumer = ? AND batch_id = ? AND split_id = ?",
                (json.dumps(raw, sort_keys=True, separators=(",", ":")), consumer, batch_id, split_id),
            )
        conn.execute("UPDATE icetail_meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()


def test_a_batch_the_previous_release_planned_across_a_schema_change_resumes_exactly(
    evolving: Any, spark: Any, tmp_path: Path
) -> None:
    """The previous release planned one batch over every snapshot, projected onto the to-snapshot's
    schema; after the upgrade it is finished exactly so (not cut, not re-projected), then the
    next batches follow one schema each."""
    cat, table = evolving
    sink_dir = tmp_path / "sink"
    config = _config(cat, tmp_path, f"parquet://{sink_dir}", with_schema_id=True, chunk_rows=150)
    runs = _schema_runs(table)
    to_snapshot = runs[2][-1]  # the old planner's batch: schemas 0, 1 and 2 in one
    plan = Planner(table).plan(None, to_snapshot)
    old_batch = InflightBatch(
        "b000001-0ld0ld00-c150-o0-n5",
        None,
        to_snapshot,
        table.metadata.snapshot_by_id(to_snapshot).timestamp_ms,
        plan.splits,
        BatchShape(150, 0, len(plan.commits), False),  # written before schema ids: none
    )
    with open_store(config.state_url) as store:
        store.ensure_consumer("c", cat.name, TABLE, Cursor.before_first_snapshot(), f"parquet://{sink_dir}")
        store.begin_batch("c", old_batch)
    crashing = CrashingSink(ParquetDirSink(sink_dir, consumer="c"), 3, after_write=True)
    with Pipeline(config, sink=crashing, spark=spark) as crashed, pytest.raises(SimulatedCrash):
        crashed.run()
    _downgrade_to_schema_3(tmp_path / "state.db")

    with Pipeline(config, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert outcomes[0].resumed and outcomes[0].batch_id == old_batch.batch_id
    assert outcomes[0].schema_id == 2  # the to-snapshot's, as the previous release projected it
    assert [o.schema_id for o in outcomes[1:]] == [3, 4]
    old_files = sorted(sink_dir.glob(f"*{old_batch.batch_id}*.parquet"))
    got = pa.concat_tables([pq.read_table(f) for f in old_files])
    want = read_changes(table, None, to_snapshot, spark=spark, with_schema_id=True)
    names = want.column_names
    assert [c for c in got.column_names if c not in (*METADATA_COLUMNS, SCHEMA_ID)] == ["id", "n", "w", "x", "e"]
    assert _multiset(got, names) == _multiset(want, names)  # exactly once; _schema_id per commit (0, 1, 2)
    assert set(got.column(SCHEMA_ID).to_pylist()) == {0, 1, 2}


def test_the_command_line_flag_adds_the_column(evolving: Any, spark: Any, tmp_path: Path) -> None:
    """`icetail changes --with-schema-id` is `read_changes(with_schema_id=True)`; `run --with-schema-id` too."""
    from icetail.monitor.cli.main import main as cli_main

    cat, table = evolving
    out = tmp_path / "changes.parquet"
    common = ["--catalog", cat.name, "--table", TABLE]
    assert cli_main(["changes", *common, "--with-schema-id", "--output", str(out)]) == 0
    got = pq.read_table(out)
    want = read_changes(table, with_schema_id=True, spark=spark)
    assert got.column_names == want.column_names and got.column_names[-1] == SCHEMA_ID
    assert _multiset(got, got.column_names) == _multiset(want, want.column_names)
    assert set(got.column(SCHEMA_ID).to_pylist()) == {0, 1, 2, 3, 4}

    sink_dir = tmp_path / "sink"
    run = ["run", *common, "--state", f"sqlite:///{tmp_path}/s.db", "--sink", f"parquet://{sink_dir}", "--once"]
    assert cli_main([*run, "--with-schema-id"]) == 0
    (first,) = sorted(sink_dir.glob("*.parquet"))[:1]
    assert set(pq.read_table(first).column(SCHEMA_ID).to_pylist()) == {0}
    assert cli_main(run) == 0  # without the flag: no column
    assert SCHEMA_ID not in pq.read_table(sorted(sink_dir.glob("*.parquet"))[-1]).column_names


SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261125"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))


def _expected_stream(table: Table, spark: Any, names_by_id: dict[int, str] | None = None) -> pa.Table:
    """What a consumer's sink holds in the end: each schema's batch as `read_changes` of its range
    (ordinals counted from the consumer's start), under `names_by_id` (an Iceberg sink's names) if given."""
    parts = []
    before, previous = 0, None
    for run in _schema_runs(table):
        part = read_changes(table, previous, run[-1], spark=spark)
        index = part.schema.get_field_index(CHANGE_ORDINAL)
        part = part.set_column(index, CHANGE_ORDINAL, pc.add(part.column(index), pa.scalar(before, pa.int32())))
        if names_by_id is not None:
            part = part.rename_columns([names_by_id.get(field_id_of(f) or -1, f.name) for f in part.schema])
        parts.append(part)
        before, previous = before + len(run), run[-1]
    return pa.concat_tables(parts, promote_options="permissive")


class _UnderSourceNames:
    """An Iceberg sink under test whose rows are read under the source table's current names, matched
    by field id through the sink's `icetail.source-field-ids` (before a rename reaches the sink, its
    column still has the old name)."""

    def __init__(self, spec: Any, names_by_source_id: dict[int, str]) -> None:
        self.spec, self.url, self.names = spec, spec.url, names_by_source_id

    def probe(self, kind: str) -> int:
        return int(self.spec.probe(kind))

    def read(self) -> pa.Table | None:
        rows = self.spec.read()
        if rows is None:
            return None
        table = self.spec.catalog.load(self.spec.ident)
        mapping = json.loads(table.properties.get(SOURCE_FIELD_IDS, "{}"))
        names = {sink_id: self.names[int(source)] for source, sink_id in mapping.items() if int(source) in self.names}
        schema = table.schema()
        return rows.rename_columns([names.get(schema.find_field(n).field_id, n) for n in rows.column_names])


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_sigkill_across_schema_changes_delivers_every_change_exactly_once(
    evolving: Any, spark: Any, tmp_path: Path, kind: str
) -> None:
    """`icetail run` SIGKILLed at seeded moments (startup, planning, inside a sink write, between a
    write and its offset commit) while it crosses four schema changes: in the end the sink holds
    every batch's rows exactly once, each under its own schema (parquet) or the table's evolved one."""
    cat, table = evolving
    spec = make_sink(kind, tmp_path)
    catalogs = [cat] if spec.catalog is None else [cat, spec.catalog]
    names = {f.field_id: f.name for f in table.schema().fields} if kind == "iceberg" else None
    sink = spec if names is None else _UnderSourceNames(spec, names)
    expected = _expected_stream(table, spark, names)
    state_url = f"sqlite:///{tmp_path}/kill-state.db"
    cmd = [
        *icetail_command(), "run", "--catalog", cat.name, "--table", TABLE, "--state", state_url,
        "--sink", spec.url, "--consumer", "k", "--until-caught-up", "--chunk-rows", "100",
    ]  # fmt: skip
    assert_exactly_once_under_kills(
        cmd, child_env(catalogs, tmp_path / "spark"), state_url=state_url, consumer="k", sink=sink,
        expected_rows=expected, current_snapshot_id=table.metadata.current_snapshot_id,
        schedule=kill_schedule(random.Random(f"{SEED}:schema:{kind}"), KILLS), logs=tmp_path / "logs",
        label=f"seed {SEED}",
    )  # fmt: skip
    with open_store(state_url) as store:
        assert [h.shape.schema_id for h in reversed(store.history("k"))] == [0, 1, 2, 3, 4]


def test_a_parquet_sink_reads_back_under_its_newest_schema(evolving: Any, spark: Any, tmp_path: Path) -> None:
    """`read_parquet_sink`: renamed columns joined by field id, widened ones cast, added ones NULL in
    older rows, a dropped one kept; the rows are `read_changes` of the whole history."""
    import icetail

    cat, table = evolving
    sink_dir = tmp_path / "sink"
    with Pipeline(_config(cat, tmp_path, f"parquet://{sink_dir}"), spark=spark) as pipeline:
        pipeline.run()
    got = icetail.read_parquet_sink(f"parquet://{sink_dir}")
    assert icetail.read_parquet_sink(sink_dir).equals(got)  # a path reads the same
    want = read_changes(table, spark=spark)
    newest = want.column_names
    assert got.column_names == [*newest, "x"]  # `x`, dropped from the source, is kept last
    assert got.schema.field("n").type == pa.int64() and pa.types.is_large_string(got.schema.field("w").type)
    assert got.column("w").null_count == 0  # the renamed `v` of the older files is `w`
    assert got.column("e").null_count == 600  # added after the first two appends
    assert got.column("x").null_count == 600  # dropped before the last two
    assert _multiset(got.select(newest), newest) == _multiset(want, newest)
    with pytest.raises(Exception, match="does not exist"):
        icetail.read_parquet_sink(tmp_path / "nowhere")
