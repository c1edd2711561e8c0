"""`run` into the Iceberg mirror (`iceberg://CATALOG/NS.TABLE?mode=mirror`): after every run the
target holds exactly the source's rows at the checkpointed snapshot. Real pyiceberg tables (SQL
catalog on SQLite), the real Spark reader, no mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo, In
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from icetail.kernel.errors import SinkRejectedError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.sinks.iceberg.mirror import tasks as iceberg_mirror_tasks
from tests.pipeline.test_pg_mirror import ARROW, CrashBeforeOffsetCommit, _append, _Crash, _source
from tests.support.catalogs import LocalCatalog
from tests.support.mirror_checks import assert_target_equals_source, mirror_config

TARGET = "tgt.t"


@pytest.fixture(autouse=True, params=["driver", "tasks"])
def place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the target's files rewritten in the driver, and in Spark tasks (threshold 0)."""
    monkeypatch.setattr(iceberg_mirror_tasks, "DEFAULT_TASK_BYTES", 0 if request.param == "tasks" else -1)
    return str(request.param)


def _config(cat: LocalCatalog, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    return mirror_config(cat.name, tmp_path, f"iceberg://{cat.name}/{TARGET}?mode=mirror", **overrides)


def _run(config: PipelineConfig, spark: Any, store: Any = None) -> Any:
    # `--engine local`: no session given, so the batches are read in this process
    with Pipeline(config, spark=None if config.engine == "local" else spark, store=store) as pipeline:
        pipeline.run()
        return pipeline.sink


def assert_mirrors(cat: LocalCatalog, config: PipelineConfig) -> None:
    """The target holds exactly the source's rows at the consumer's cursor, each key once."""
    target = cat.load(TARGET).scan().to_arrow()
    ids = target.column("id").to_pylist()
    assert len(set(ids)) == len(ids), "a key twice in the target"
    assert_target_equals_source(cat, config, target, ("id", "v"))


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_mirror_follows_inserts_updates_key_changes_and_deletes(
    tmp_path: Path, spark: Any, use_catalogs: Any, engine: str
) -> None:
    """On Spark, and read in `run`'s own process (`--engine local`): the same target."""
    cat = _source(tmp_path, use_catalogs)
    config = _config(cat, tmp_path, engine=engine)
    _append(cat, list(range(40)), "a")
    _append(cat, list(range(40, 60)), "b")
    _run(config, spark)
    assert_mirrors(cat, config)
    target = cat.load(TARGET)
    assert [target.schema().find_column_name(i) for i in target.schema().identifier_field_ids] == ["id"]
    assert {f.name for f in target.schema().fields} == {"id", "v"}, "no metadata columns in the mirror"
    cat.load("ns.t").delete(In("id", [3, 17, 41]))  # copy-on-write: a rewritten file, carry-overs cancelled
    _append(cat, [3, 100], "re")  # 3 deleted and re-inserted in one batch
    _run(config, spark)
    assert_mirrors(cat, config)
    cat.load("ns.t").upsert(pa.table({"id": [5, 6, 200], "v": ["u5", "u6", "n200"]}, schema=ARROW))
    # the key changes: 7 becomes 300 in one overwrite (a delete and an insert in one snapshot)
    cat.load("ns.t").overwrite(pa.table({"id": [300], "v": ["was7"]}, schema=ARROW), EqualTo("id", 7))
    _run(config, spark)
    assert_mirrors(cat, config)
    commits = [s for s in cat.load(TARGET).snapshots() if (s.summary or {}).get("icetail.consumer") == "mirror"]
    assert commits and len(commits) == len(cat.load(TARGET).snapshots()), "every target commit names its chunks"


def test_a_batch_over_many_target_files_rewrites_them_all(
    tmp_path: Path, spark: Any, use_catalogs: Any, place: str
) -> None:
    """Groups of 10 rows make a target of 12 files; then an overwrite updates a key in each (pyiceberg
    commits a delete, then an append: two groups): the deletes' group rewrites the 12 files, the
    inserts' group reads them again, in Spark tasks or in the driver; the target equals the source."""
    cat = _source(tmp_path, use_catalogs)
    for f in range(12):
        _append(cat, list(range(f * 10, f * 10 + 10)), "a")
    small = _config(cat, tmp_path, chunk_rows=10, sink_commit_rows=10, sink_commit_interval_seconds=600)
    _run(small, spark)
    assert len(cat.load(TARGET).inspect.files()) == 12
    keys = [f * 10 + 3 for f in range(12)]
    cat.load("ns.t").overwrite(pa.table({"id": keys, "v": ["u"] * 12}, schema=ARROW), In("id", keys))  # updates
    sink = _run(_config(cat, tmp_path), spark)
    assert_mirrors(cat, _config(cat, tmp_path))
    assert sink.files_replaced == 12 and sink.last is not None and sink.last.files_read == 12
    assert sink.spark_tasks == (8 if place == "tasks" else 0), "2 x 12 files in 2 cores x 2 tasks a core, or none"


def test_start_full_loads_the_current_rows_then_follows(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    cat.load("ns.t").delete(In("id", [1, 2]))
    config = _config(cat, tmp_path, start="full")
    _run(config, spark)
    assert_mirrors(cat, config)
    cat.load("ns.t").delete(In("id", [4]))
    _run(config, spark)
    assert_mirrors(cat, config)


def test_net_batches_mirror_too(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(20)), "a")
    cat.load("ns.t").delete(In("id", [1, 2]))
    _append(cat, [1], "back")
    config = _config(cat, tmp_path, net=True)
    _run(config, spark)
    assert_mirrors(cat, config)


def test_chunks_replayed_after_a_crash_are_skipped_by_the_ledger(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    """The process dies after the target committed a group and before the offsets did; the next run
    reads those chunks again, grouped otherwise, and the target's snapshot summaries leave them out."""
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    _run(_config(cat, tmp_path), spark)
    cat.load("ns.t").upsert(pa.table({"id": [1, 2, 3, 50], "v": ["x", "y", "z", "n"]}, schema=ARROW))
    _append(cat, list(range(100, 120)), "new")
    cat.load("ns.t").delete(In("id", [4, 5]))
    _append(cat, [4], "back")

    def config(rows: int) -> PipelineConfig:
        return _config(cat, tmp_path, chunk_rows=2, sink_commit_rows=rows, sink_commit_interval_seconds=600)

    store = CrashBeforeOffsetCommit(config(4).state_url, 2)
    with pytest.raises(_Crash):
        _run(config(4), spark, store)
    sink = _run(config(10), spark)
    assert getattr(sink, "replayed", 0) >= 1, "the chunks whose offsets were lost came again and were skipped"
    assert_mirrors(cat, config(10))


def test_a_mismatched_existing_target_is_refused_at_start(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, [1], "a")
    cat.catalog().create_namespace("tgt")
    keyed_id_only = Schema(NestedField(1, "id", LongType(), required=True), identifier_field_ids=[1])
    cat.catalog().create_table(TARGET, keyed_id_only)
    with pytest.raises(SinkRejectedError) as info:
        _run(_config(cat, tmp_path), spark)
    assert "lacks column(s) v" in str(info.value) and "\n" not in str(info.value)


def test_the_target_follows_the_source_schema_run_by_run(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    """The source gains a column, renames one, widens int to long and drops one between runs (the
    last run spans two changes: one batch per schema); after every run the target has the source's
    columns and types, by field id, and its rows."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "n", IntegerType()),
        NestedField(3, "v", StringType()),
        NestedField(4, "x", StringType()),
        identifier_field_ids=[1],
    )
    cat = _source(tmp_path, use_catalogs, schema)
    config = _config(cat, tmp_path)

    def append(rows: dict[str, list[Any]]) -> None:
        table = cat.load("ns.t")
        arrow = table.schema().as_arrow()
        table.append(pa.table({f.name: pa.array(rows.get(f.name), f.type) for f in arrow}, schema=arrow))

    def run_and_check() -> None:
        _run(config, spark)
        source, target = cat.load("ns.t").schema(), cat.load(TARGET).schema()
        assert [(f.name, str(f.field_type)) for f in target.fields] == [
            (f.name, str(f.field_type)) for f in source.fields
        ]
        got = cat.load(TARGET).scan().to_arrow()
        assert len(set(got.column("id").to_pylist())) == got.num_rows, "a key twice in the target"
        assert_target_equals_source(cat, config, got, [f.name for f in source.fields])

    append({"id": [1, 2, 3], "n": [10, 20, 30], "v": ["a", "b", "c"], "x": ["x1", "x2", "x3"]})
    run_and_check()
    with cat.load("ns.t").update_schema() as update:
        update.add_column("e", LongType())
    append({"id": [4], "n": [40], "v": ["d"], "x": ["x4"], "e": [400]})
    cat.load("ns.t").delete(EqualTo("id", 2))
    run_and_check()
    with cat.load("ns.t").update_schema() as update:
        update.rename_column("v", "w")
    append({"id": [5], "n": [50], "w": ["e"], "x": ["x5"], "e": [500]})
    run_and_check()
    with cat.load("ns.t").update_schema() as update:
        update.update_column("n", LongType())
    append({"id": [6], "n": [6_000_000_000], "w": ["f"], "x": ["x6"], "e": [600]})
    cat.load("ns.t").delete(EqualTo("id", 3))
    with cat.load("ns.t").update_schema() as update:
        update.delete_column("x")
    append({"id": [7], "n": [70], "w": ["g"], "e": [700]})
    cat.load("ns.t").upsert(pa.table({"id": [1], "n": [11], "w": ["a2"], "e": [100]}, schema=_arrow(cat)))
    run_and_check()
    target = cat.load(TARGET)
    assert [target.schema().find_column_name(i) for i in target.schema().identifier_field_ids] == ["id"]
    assert len(target.schemas()) == 5, "one schema change per source change (the map recorded in the first)"


def _arrow(cat: LocalCatalog) -> pa.Schema:
    return cat.load("ns.t").schema().as_arrow()
