"""`run` into the Iceberg history (`iceberg://CATALOG/NS.TABLE?mode=history`): for every source
snapshot followed, the versions valid at it are exactly the source's rows at it. Real pyiceberg
tables (SQL catalog on SQLite), the real Spark reader, no mocks; the Java-written sources are in
tests/differential/test_iceberg_mirror.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo, In
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from icetail.kernel.errors import ConfigError, SinkRejectedError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.pipeline.test_pg_mirror import ARROW, CrashBeforeOffsetCommit, _append, _Crash, _source
from tests.support.catalogs import LocalCatalog
from tests.support.mirror_checks import history_problems, mirror_config

TARGET = "tgt.h"
VALIDITY = ["_valid_from_snapshot_id", "_valid_to_snapshot_id", "_valid_from", "_valid_to"]


def _config(cat: LocalCatalog, tmp_path: Path, **overrides: Any) -> PipelineConfig:
    return mirror_config(cat.name, tmp_path, f"iceberg://{cat.name}/{TARGET}?mode=history", **overrides)


def _run(config: PipelineConfig, spark: Any, store: Any = None) -> Any:
    # `--engine local`: no session given, so the batches are read in this process
    with Pipeline(config, spark=None if config.engine == "local" else spark, store=store) as pipeline:
        pipeline.run()
        return pipeline.sink


def _cursor(config: PipelineConfig) -> int:
    with open_store(config.state_url) as store:
        checkpoint = store.load(config.consumer_id)
    assert checkpoint is not None and checkpoint.inflight is None and checkpoint.cursor.snapshot_id is not None
    return checkpoint.cursor.snapshot_id


def assert_history(
    cat: LocalCatalog, config: PipelineConfig, columns: tuple[str, ...] = ("id", "v"), since: int | None = None
) -> pa.Table:
    """For every source snapshot from `since` (default: the first) to the cursor, the versions valid
    at it are the source's rows at it, stamped with the snapshots' commit times; the versions."""
    source = cat.load("ns.t")
    cursor = _cursor(config)
    assert cursor == source.current_snapshot().snapshot_id  # type: ignore[union-attr]
    lineage = [s.snapshot_id for s in reversed(list(ancestors_of(source.snapshot_by_id(cursor), source.metadata)))]
    if since is not None:
        lineage = lineage[lineage.index(since) :]
    versions = cat.load(TARGET).scan().to_arrow()
    commit_ms = {s.snapshot_id: s.timestamp_ms for s in source.snapshots()}
    rows_at = lambda s: _projected(source, s, columns)  # noqa: E731
    problems = history_problems(versions, lineage, rows_at, columns, commit_ms=commit_ms)
    assert not problems, "\n".join(problems)
    return versions


def _projected(source: Any, snapshot_id: int, columns: tuple[str, ...]) -> pa.Table:
    """The source's rows at a snapshot, its columns named as now (by field id); a column it lacked: nulls."""
    rows = source.scan(snapshot_id=snapshot_id).to_arrow()
    then = source.schemas()[source.snapshot_by_id(snapshot_id).schema_id]
    now = {f.field_id: f.name for f in source.schema().fields}
    rows = rows.rename_columns([now.get(then.find_field(n).field_id, n) for n in rows.column_names])
    return pa.table({c: rows.column(c) if c in rows.column_names else pa.nulls(rows.num_rows) for c in columns})


def _versions_of(versions: pa.Table, key: int) -> list[dict[str, Any]]:
    return sorted((r for r in versions.to_pylist() if r["id"] == key), key=lambda r: r["_valid_from"])


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_history_holds_the_source_at_every_snapshot(tmp_path: Path, spark: Any, use_catalogs: Any, engine: str) -> None:
    """On Spark, and read in `run`'s own process (`--engine local`): the same history."""
    cat = _source(tmp_path, use_catalogs)
    config = _config(cat, tmp_path, sink_commit_interval_seconds=600, engine=engine)
    _append(cat, list(range(40)), "a")
    _append(cat, list(range(40, 60)), "b")
    _run(config, spark)
    assert_history(cat, config)
    target = cat.load(TARGET)
    schema = target.schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id", "_valid_from_snapshot_id"]
    assert [(f.name, str(f.field_type), f.required) for f in schema.fields] == [
        ("id", "long", True),
        ("v", "string", False),
        ("_valid_from_snapshot_id", "long", True),
        ("_valid_to_snapshot_id", "long", False),
        ("_valid_from", "timestamptz", False),
        ("_valid_to", "timestamptz", False),
    ]
    cat.load("ns.t").delete(In("id", [3, 17, 41]))  # copy-on-write: a rewritten file, carry-overs cancelled
    _append(cat, [3, 100], "re")  # 3 deleted and re-inserted in one batch
    _run(config, spark)
    versions = assert_history(cat, config)
    assert len(_versions_of(versions, 4)) == 1, "a carried-over row (rewritten file) makes no version"
    assert [r["v"] for r in _versions_of(versions, 3)] == ["a3", "re3"]
    assert [r["v"] for r in _versions_of(versions, 17)] == ["a17"] and _versions_of(versions, 17)[0][VALIDITY[1]]
    cat.load("ns.t").upsert(pa.table({"id": [5, 6, 200], "v": ["u5", "u6", "n200"]}, schema=ARROW))
    cat.load("ns.t").overwrite(pa.table({"id": [300], "v": ["was7"]}, schema=ARROW), EqualTo("id", 7))  # 7 -> 300
    _run(config, spark)  # updates: each snapshot reconciled, a chunk applied alone
    versions = assert_history(cat, config)
    assert [r["v"] for r in _versions_of(versions, 7)] == ["a7"] and _versions_of(versions, 7)[0][VALIDITY[1]]
    for tag in ("p", "q", "r"):  # one key inserted in three snapshots (deleted between) of one group
        _append(cat, [400], tag)
        if tag != "r":
            cat.load("ns.t").delete(EqualTo("id", 400))
    before = len(cat.load(TARGET).snapshots())
    _run(config, spark)
    versions = assert_history(cat, config)
    assert len(cat.load(TARGET).snapshots()) == before + 1, "five snapshots, one group: one overwrite snapshot"
    four = _versions_of(versions, 400)
    assert [r["v"] for r in four] == ["p400", "q400", "r400"], "a version per snapshot, not per group"
    assert all(r[VALIDITY[1]] is not None for r in four[:-1]) and four[-1][VALIDITY[1]] is None
    commits = [s for s in cat.load(TARGET).snapshots() if (s.summary or {}).get("icetail.consumer") == "mirror"]
    assert len(commits) == len(cat.load(TARGET).snapshots()), "every target commit names its chunks"


def test_start_full_starts_the_history_at_the_start_snapshot(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    cat.load("ns.t").delete(In("id", [1, 2]))
    start = cat.load("ns.t").current_snapshot().snapshot_id  # type: ignore[union-attr]
    config = _config(cat, tmp_path, start="full")
    _run(config, spark)
    versions = assert_history(cat, config, since=start)
    assert set(versions.column("_valid_from_snapshot_id").to_pylist()) == {start}
    cat.load("ns.t").delete(In("id", [4]))
    cat.load("ns.t").upsert(pa.table({"id": [5], "v": ["u5"]}, schema=ARROW))
    _run(config, spark)
    assert_history(cat, config, since=start)


def test_a_replay_after_a_crash_adds_no_version_twice(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    """The process dies after the target committed a group and before the offsets did; the next run
    reads those chunks again, grouped otherwise: the ledger leaves them out, no version twice."""
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    _run(_config(cat, tmp_path), spark)
    cat.load("ns.t").upsert(pa.table({"id": [1, 2, 3, 50], "v": ["x", "y", "z", "n"]}, schema=ARROW))
    _append(cat, list(range(100, 120)), "new")
    cat.load("ns.t").delete(In("id", [4, 5]))
    _append(cat, [4], "back")
    cat.load("ns.t").upsert(pa.table({"id": [1, 4], "v": ["x2", "back2"]}, schema=ARROW))

    def config(rows: int) -> PipelineConfig:
        return _config(cat, tmp_path, chunk_rows=2, sink_commit_rows=rows, sink_commit_interval_seconds=600)

    store = CrashBeforeOffsetCommit(config(4).state_url, 2)
    with pytest.raises(_Crash):
        _run(config(4), spark, store)
    sink = _run(config(10), spark)
    assert getattr(sink, "replayed", 0) >= 1, "the chunks whose offsets were lost came again and were skipped"
    versions = assert_history(cat, config(10))  # a version twice is one of its problems
    assert [r["v"] for r in _versions_of(versions, 4)] == ["a4", "back4", "back2"]


def test_history_follows_the_source_schema_and_keeps_dropped_columns(
    tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """The source gains a column, renames one and drops one between runs; the history table follows
    by field id and keeps the dropped column: old versions hold its values, later ones null."""
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

    def upsert(rows: dict[str, list[Any]]) -> None:  # pyiceberg's upsert fails after a rename: delete, append
        cat.load("ns.t").delete(In("id", rows["id"]))
        append(rows)

    append({"id": [1, 2, 3], "n": [10, 20, 30], "v": ["a", "b", "c"], "x": ["x1", "x2", "x3"]})
    _run(config, spark)
    assert_history(cat, config, ("id", "n", "v", "x"))
    with cat.load("ns.t").update_schema() as update:
        update.add_column("e", LongType())
    append({"id": [4], "n": [40], "v": ["d"], "x": ["x4"], "e": [400]})
    upsert({"id": [1], "n": [11], "v": ["a2"], "x": ["x1"], "e": [100]})
    _run(config, spark)
    assert_history(cat, config, ("id", "n", "v", "x", "e"))
    with cat.load("ns.t").update_schema() as update:
        update.rename_column("v", "w")
    upsert({"id": [2], "n": [21], "w": ["b2"], "x": ["x2"], "e": [200]})
    _run(config, spark)
    assert_history(cat, config, ("id", "n", "w", "x", "e"))
    with cat.load("ns.t").update_schema() as update:
        update.delete_column("x")
    upsert({"id": [3], "n": [31], "w": ["c2"], "e": [300]})
    append({"id": [5], "n": [50], "w": ["e"], "e": [500]})
    _run(config, spark)
    versions = assert_history(cat, config, ("id", "n", "w", "e"))  # x: the source's rows have none
    names = [f.name for f in cat.load(TARGET).schema().fields]
    assert names == ["id", "n", "w", "x", *VALIDITY, "e"], "renamed by field id, the dropped x kept"
    threes = _versions_of(versions, 3)
    assert [(r["w"], r["x"]) for r in threes] == [("c", "x3"), ("c2", None)], "old versions keep x, later null"
    assert [(r["w"], r["x"]) for r in _versions_of(versions, 5)] == [("e", None)]


def test_a_target_that_does_not_fit_is_refused_in_one_line(tmp_path: Path, spark: Any, use_catalogs: Any) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, [1], "a")
    _run(mirror_config(cat.name, tmp_path, f"iceberg://{cat.name}/{TARGET}?mode=mirror", consumer="m2"), spark)
    with pytest.raises(SinkRejectedError) as info:  # a mirror's table: no validity columns
        _run(_config(cat, tmp_path), spark)
    message = str(info.value)
    assert "_valid_from_snapshot_id" in message and "\n" not in message, message
    assert Counter(cat.load(TARGET).scan().to_arrow().column("id").to_pylist()) == {1: 1}


def test_history_refuses_keep_carry_over_before_anything_is_written(
    tmp_path: Path, spark: Any, use_catalogs: Any
) -> None:
    """Carry-over rows kept would be recorded as versions of keys that did not change."""
    cat = _source(tmp_path, use_catalogs)
    _append(cat, [1], "a")
    with pytest.raises(ConfigError, match="--keep-carry-over"):
        _run(_config(cat, tmp_path, carry_over_removal=False), spark)
    assert not cat.catalog().table_exists(TARGET)
