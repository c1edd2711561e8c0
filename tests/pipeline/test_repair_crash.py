"""A repair batch (direct diff after expiry) under SIGKILL is exactly once, like any batch.

A `--protect-cursor` consumer delivers a Java-written table and stops; Java commits more and
expires every snapshot but the current one (`retain_last => 1`); then

    icetail run ... --protect-cursor --chunk-rows 40

is SIGKILLed at seeded moments (start-up, planning and the write-ahead batch, inside a sink
write, between a write and its offset commit) and restarted until it finishes. After every run
the sink's rows of the repair batch are a sub-multiset of Java's difference between the cursor
snapshot and the current one; at the end exactly that difference, in one collapsed batch.

Two shapes: appends only (many chunks, each committed by offset) and a mix of deletes,
updates and appends (reconciled, delivered as one chunk).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.state.store import open_store
from tests.support.compare import is_submultiset
from tests.support.crash import Attempt, crash_loop, kill_schedule
from tests.support.expiry import expire
from tests.support.oracle import DELETE_TYPES, canonical_rows, rows_at
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import make_sink
from tests.support.stores import view_state

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261122"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))


def _signed(rows: pa.Table | None, current_id: int, schema: Any) -> Counter[tuple[Any, ...]]:
    """The repair batch's rows as (sign, row...) tuples: -1 for DELETE/UPDATE_BEFORE, +1 otherwise."""
    if rows is None:
        return Counter()
    repair = rows.filter(pc.equal(rows.column("_commit_snapshot_id"), current_id))
    names = [f.name for f in schema.fields]
    types = repair.column("_change_type").to_pylist()
    tuples = canonical_rows(repair.select(names), schema, schema)
    return Counter((-1 if k in DELETE_TYPES else 1, *t) for t, k in zip(tuples, types, strict=True))


def _kill_until_done(
    cmd: list[str], env: dict[str, str], state_url: str, consumer: str, sink: Any, *, key: str,
    expected: Counter[tuple[Any, ...]], current_id: int, schema: Any, tmp_path: Path,
) -> None:
    """Runs `cmd` under seeded SIGKILLs until it finishes; after every run the repair batch's rows
    in the sink are a sub-multiset of `expected`, at the end exactly `expected`, delivered as one
    collapsed batch ending at the current snapshot."""

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        got = _signed(rows, current_id, schema)
        assert is_submultiset(got, expected), f"after run {attempt.index}: extra {got - expected}"

    report = crash_loop(
        cmd, env, state_url=state_url, consumer=consumer, sink=sink,
        schedule=kill_schedule(random.Random(f"{SEED}:repair:{key}"), KILLS), logs=tmp_path / "logs", check=check,
    )  # fmt: skip
    summary = report.summary()
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    got = _signed(sink.read(), current_id, schema)
    assert got == expected, f"extra {got - expected}, missing {expected - got}\n{summary}"
    state = view_state(state_url, consumer)
    assert state.cursor == current_id and state.inflight_batch is None, state
    with open_store(state_url, create=False) as store:
        last = store.history(consumer, 1)[0]
    assert last.to_snapshot_inclusive == current_id and last.shape.collapsed, last


@pytest.mark.parametrize("shape", ["appends", "mixed"])
def test_sigkill_during_a_repair_batch_is_exactly_once(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, shape: str
) -> None:
    catalog.set_env(monkeypatch)
    ident = catalog.ident("t")
    fq = catalog.fq(ident)
    props = "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    catalog.sql(f"CREATE TABLE {fq} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range(0, 300)")
    state_url = f"sqlite:///{tmp_path}/state.db"
    sink = make_sink("parquet", tmp_path)
    consumer = "repair"
    config = PipelineConfig(catalog.name, ident, state_url, sink.url, consumer=consumer, protect_cursor=True)
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(ident)
    for first in (1000, 2000, 3000):
        catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range({first}, {first + 150})")
    if shape == "mixed":
        catalog.sql(f"DELETE FROM {fq} WHERE id % 7 = 0 AND id < 300")
        catalog.sql(f"UPDATE {fq} SET v = 'u' WHERE id % 11 = 1")
    expire(catalog, ident, "procedure-retain-last")
    table = catalog.load_table(ident)
    current_id = table.metadata.current_snapshot_id
    assert len(table.metadata.snapshots) == 2  # the current snapshot and the tagged cursor
    schema = table.schema()
    before = rows_at(catalog, ident, cursor_id, schema)
    after = rows_at(catalog, ident, current_id, schema)
    expected = Counter({(-1, *r): n for r, n in (before - after).items()})
    expected.update({(1, *r): n for r, n in (after - before).items()})
    assert sum(expected.values()) >= 450

    env = child_env([catalog], tmp_path / "spark")
    cmd = [
        *icetail_command(), "run", "--catalog", catalog.name, "--table", ident, "--state", state_url,
        "--sink", sink.url, "--consumer", consumer, "--protect-cursor", "--chunk-rows", "40",
    ]  # fmt: skip
    _kill_until_done(
        cmd, env, state_url, consumer, sink, key=shape, expected=expected, current_id=current_id, schema=schema,
        tmp_path=tmp_path,
    )
    assert catalog.load_table(ident).metadata.refs[f"icetail-{consumer}"].snapshot_id == current_id


def test_sigkill_during_a_rollback_repair_is_exactly_once(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """A consumer delivered snapshots the table then rolled back past; with --on-missing-cursor diff
    the rollback is delivered as one collapsed batch (removed rows DELETE, new rows INSERT),
    exactly once across SIGKILLs."""
    catalog.set_env(monkeypatch)
    ident = catalog.ident("rb")
    fq = catalog.fq(ident)
    props = "'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read'"
    catalog.sql(f"CREATE TABLE {fq} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range(0, 300)")
    rollback_to = catalog.current_snapshot_id(ident)
    for first in (1000, 2000):
        catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range({first}, {first + 150})")
    catalog.sql(f"DELETE FROM {fq} WHERE id % 5 = 0 AND id < 300")
    state_url = f"sqlite:///{tmp_path}/state.db"
    sink = make_sink("parquet", tmp_path)
    consumer = "rolled"
    config = PipelineConfig(catalog.name, ident, state_url, sink.url, consumer=consumer)
    with Pipeline(config, spark=spark) as pipeline:
        pipeline.run()
    cursor_id = catalog.current_snapshot_id(ident)
    catalog.sql(f"CALL {{cat}}.system.rollback_to_snapshot('{ident}', {rollback_to})")
    catalog.sql(f"INSERT INTO {fq} SELECT id, CAST(id AS STRING) FROM range(3000, 3150)")
    catalog.sql(f"UPDATE {fq} SET v = 'u' WHERE id % 11 = 1 AND id < 300")
    table = catalog.load_table(ident)
    current_id = table.metadata.current_snapshot_id
    schema = table.schema()
    before = rows_at(catalog, ident, cursor_id, schema)
    after = rows_at(catalog, ident, current_id, schema)
    expected = Counter({(-1, *r): n for r, n in (before - after).items()})
    expected.update({(1, *r): n for r, n in (after - before).items()})
    assert sum(expected.values()) >= 450

    env = child_env([catalog], tmp_path / "spark")
    cmd = [
        *icetail_command(), "run", "--catalog", catalog.name, "--table", ident, "--state", state_url,
        "--sink", sink.url, "--consumer", consumer, "--on-missing-cursor", "diff", "--chunk-rows", "40",
    ]  # fmt: skip
    _kill_until_done(
        cmd, env, state_url, consumer, sink, key="rollback", expected=expected, current_id=current_id,
        schema=schema, tmp_path=tmp_path,
    )
