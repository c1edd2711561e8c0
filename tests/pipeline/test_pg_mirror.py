"""`run` into the PostgreSQL mirror: after every run the target equals the source table at the
checkpointed snapshot. Real pyiceberg source tables (SQL catalog on SQLite), a real Spark reader,
a real PostgreSQL; the Java-written MoR/CoW tables are in tests/differential/test_pg_mirror.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo, In
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.mirror_checks import assert_target_equals_source, mirror_config
from tests.support.pg_mirror import ledger, mirror_url, query, target_table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    identifier_field_ids=[1],
)
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.large_string())])


def _source(tmp_path: Path, use_catalogs: Any, schema: Schema = SCHEMA) -> LocalCatalog:
    cat = new_catalog(tmp_path / "src", "mirrorsrc")
    cat.catalog().create_namespace("ns")
    cat.catalog().create_table("ns.t", schema=schema)
    use_catalogs(cat)
    return cat


def _append(cat: LocalCatalog, ids: list[int], tag: str) -> None:
    cat.load("ns.t").append(pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=ARROW))


def _config(cat: LocalCatalog, tmp_path: Path, pg_schema: str, **overrides: Any) -> PipelineConfig:
    return mirror_config(cat.name, tmp_path, mirror_url(pg_schema), **overrides)


def _run(config: PipelineConfig, spark: Any, store: Any = None) -> None:
    # `--engine local`: no session given, so the batches are read in this process
    with Pipeline(config, spark=None if config.engine == "local" else spark, store=store) as pipeline:
        pipeline.run()


def assert_mirrors(cat: LocalCatalog, config: PipelineConfig, pg_schema: str, columns: tuple[str, ...] = ("id", "v")):
    """The target holds exactly the source's rows at the consumer's cursor."""
    assert_target_equals_source(cat, config, target_table(pg_schema), columns)


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_mirror_follows_appends_deletes_upserts_and_overwrites(
    tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str, engine: str
) -> None:
    """On Spark, and read in `run`'s own process (`--engine local`): the same target."""
    cat = _source(tmp_path, use_catalogs)
    config = _config(cat, tmp_path, pg_schema, engine=engine)
    _append(cat, list(range(40)), "a")
    _append(cat, list(range(40, 60)), "b")
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    cat.load("ns.t").delete(In("id", [3, 17, 41]))  # copy-on-write: a rewritten file, carry-overs cancelled
    _append(cat, [3, 100], "re")  # 3 comes back in the same batch
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    table = cat.load("ns.t")
    table.upsert(pa.table({"id": [5, 6, 200], "v": ["u5", "u6", "n200"]}, schema=ARROW))
    cat.load("ns.t").overwrite(pa.table({"id": [7, 300], "v": ["o7", "o300"]}, schema=ARROW), EqualTo("id", 7))
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    assert len(ledger(pg_schema)) >= 1  # only the last batch's chunks are kept


def test_start_full_loads_the_current_rows_then_follows(
    tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str
) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    cat.load("ns.t").delete(In("id", [1, 2]))
    config = _config(cat, tmp_path, pg_schema, start="full")
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    cat.load("ns.t").delete(In("id", [4]))
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)


def test_net_batches_mirror_too(tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str) -> None:
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(20)), "a")
    cat.load("ns.t").delete(In("id", [1, 2]))
    _append(cat, [1], "back")
    config = _config(cat, tmp_path, pg_schema, net=True)
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)


def test_a_table_without_a_key_is_refused_at_start(
    tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str
) -> None:
    keyless = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
    cat = _source(tmp_path, use_catalogs, keyless)
    _append(cat, [1], "a")
    config = _config(cat, tmp_path, pg_schema)
    with pytest.raises(ConfigError) as info:
        _run(config, spark)
    message = str(info.value)
    assert "has no key to mirror by" in message and "--identifier-columns" in message and "\n" not in message
    config = _config(cat, tmp_path, pg_schema, identifier_columns=("id",))  # the way out it names
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)


class _Crash(BaseException):
    """Stands for the process dying: nothing after it runs, nothing catches it."""


class CrashBeforeOffsetCommit:
    """A real checkpoint store whose `crash_at`-th offset commit never happens (the process died
    after the sink's transaction committed and before the offsets did)."""

    def __init__(self, url: str, crash_at: int) -> None:
        self._store = open_store(url)
        self._crash_at = crash_at
        self.commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _maybe_crash(self) -> None:
        self.commits += 1
        if self.commits == self._crash_at:
            raise _Crash

    def commit_chunk(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_crash()
        return self._store.commit_chunk(*args, **kwargs)

    def commit_chunks(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_crash()
        return self._store.commit_chunks(*args, **kwargs)


@pytest.mark.parametrize(
    ("crash_at", "rows_before", "rows_after"),
    [(1, 4, 4), (2, 4, 10), (2, 6, 0), (4, 0, 6)],
    ids=["same-groups", "regrouped-larger", "then-per-chunk", "per-chunk-then-groups"],
)
def test_chunks_replayed_after_a_crash_are_skipped_by_the_ledger(
    tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str, crash_at: int, rows_before: int, rows_after: int
) -> None:
    """The process dies after the target committed a group (or a chunk) and before the offsets did;
    the next run re-reads those chunks, grouped the same or otherwise, and the ledger leaves them out."""
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(30)), "a")
    _run(_config(cat, tmp_path, pg_schema), spark)
    cat.load("ns.t").upsert(pa.table({"id": [1, 2, 3, 50], "v": ["x", "y", "z", "n"]}, schema=ARROW))
    _append(cat, list(range(100, 120)), "new")  # ten chunks of 2 rows: several groups
    cat.load("ns.t").delete(In("id", [4, 5]))
    _append(cat, [4], "back")  # a key deleted and re-inserted in one batch: a replay must not lose it
    _append(cat, list(range(200, 210)), "more")

    def config(rows: int) -> PipelineConfig:
        return _config(cat, tmp_path, pg_schema, chunk_rows=2, sink_commit_rows=rows, sink_commit_interval_seconds=600)

    store = CrashBeforeOffsetCommit(config(rows_before).state_url, crash_at)
    with pytest.raises(_Crash):
        with Pipeline(config(rows_before), spark=spark, store=store) as pipeline:
            pipeline.run()
    with Pipeline(config(rows_after), spark=spark) as pipeline:
        pipeline.run()
        sink = pipeline.sink
    assert getattr(sink, "replayed", 0) >= 1, "the chunks whose offsets were lost came again and were skipped"
    assert_mirrors(cat, config(rows_after), pg_schema)


def test_chunks_are_applied_in_groups(tmp_path: Path, spark: Any, use_catalogs: Any, pg_schema: str) -> None:
    """Ten chunks of 2 rows, a group per 6 rows: four transactions (the ledger rows of one
    transaction share its now()); with --sink-commit-rows 0, one per chunk."""
    cat = _source(tmp_path, use_catalogs)
    _append(cat, list(range(20)), "a")
    config = _config(cat, tmp_path, pg_schema, chunk_rows=2, sink_commit_rows=6, sink_commit_interval_seconds=600)
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    times = query(f'SELECT applied_at, count(*) FROM "{pg_schema}".icetail_mirror_ledger GROUP BY 1 ORDER BY 1')
    assert [n for _, n in times] == [3, 3, 3, 1]
    _append(cat, list(range(20, 26)), "b")
    config = replace(config, sink_commit_rows=0)
    _run(config, spark)
    assert_mirrors(cat, config, pg_schema)
    times = query(f'SELECT applied_at, count(*) FROM "{pg_schema}".icetail_mirror_ledger GROUP BY 1 ORDER BY 1')
    assert [n for _, n in times] == [1, 1, 1]
