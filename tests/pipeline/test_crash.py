"""Exactly once under SIGKILL: `icetail run` killed at random moments, restarted until it finishes.

The source table has ~11 snapshots of mixed kinds (multi-file, multi-row-group appends,
copy-on-write deletes, an overwrite, a schema change). Each combination of sink (parquet
directory, Iceberg table) and state store (SQLite, PostgreSQL) runs

    icetail run ... --until-caught-up --max-snapshots-per-batch 2 --chunk-rows 100

as a child process and SIGKILLs its whole process group (Python driver, Spark JVM, Python
workers) by a seeded schedule: during imports and state migration, during consumer creation,
planning and the write-ahead batch, during Spark start-up, right after a sink write appears
(inside the write, between it and the offset commit, or inside the commit) and at random times.
Then one run is left to finish. After every run the sink must hold a sub-multiset of the
table's whole change stream (`read_changes`, the oracle) and at least the rows the state says
were committed; at the end exactly that stream, compared as multisets of full rows including
`_change_ordinal`, `_commit_snapshot_id` and `_commit_timestamp`. A further run of the
caught-up consumer must not touch the sink.

ICETAIL_CRASH_SEED and ICETAIL_CRASH_KILLS change the schedule; bench/crash_soak.py is the long form.
"""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Table

from icetail.monitor.engine.api import read_changes
from icetail.state.store import open_store
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.compare import diff_report, is_submultiset, row_multiset
from tests.support.crash import Attempt, crash_loop, kill_schedule
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import make_sink
from tests.support.stores import view_state
from tests.support.tables import build_mixed_table, data_file_layout

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261122"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))
SOURCE_TABLE = "ns.events"


@dataclass(frozen=True)
class Source:
    catalog: LocalCatalog
    ident: str
    table: Table
    expected: pa.Table


@pytest.fixture(scope="module")
def crash_source(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Source:
    cat = new_catalog(tmp_path_factory.mktemp("crash-source"), "crashsrc")
    table = build_mixed_table(cat, SOURCE_TABLE)
    expected = read_changes(table, spark=spark)
    return Source(cat, SOURCE_TABLE, table, expected)


def test_source_table_has_the_intended_shape(crash_source: Source) -> None:
    table = crash_source.table
    snapshots = table.metadata.snapshots
    assert 9 <= len(snapshots) <= 13, [s.summary.operation for s in snapshots if s.summary]
    operations = {s.summary.operation.value for s in snapshots if s.summary}
    assert {"append", "overwrite"} <= operations, operations
    first = snapshots[0].summary
    assert first is not None and int(first["added-data-files"]) >= 2, "the first append should write several files"
    layout = data_file_layout(table)
    assert sum(1 for _, _, groups in layout if groups >= 2) >= 3, layout
    assert len(table.metadata.schemas) == 2  # the added column
    stream = crash_source.expected
    kinds = set(stream.column("_change_type").to_pylist())
    assert kinds == {"INSERT", "DELETE"}, kinds
    assert len(set(stream.column("_change_ordinal").to_pylist())) >= 9


# the engine that reads each batch: spark (every batch; the children's default here), local (every
# batch in the run's own process, no JVM), or alternating (--local-max-bytes between the batches'
# sizes: some batches in process, the others on Spark, a batch begun by one finished by either)
COMBOS = [
    pytest.param("parquet", "sqlite", "spark", id="parquet-sqlite"),
    pytest.param("parquet", "postgresql", "spark", id="parquet-postgresql"),
    pytest.param("iceberg", "sqlite", "spark", id="iceberg-sqlite"),
    pytest.param("iceberg", "postgresql", "spark", id="iceberg-postgresql"),
    pytest.param("parquet", "sqlite", "alternating", id="parquet-sqlite-engines-alternating"),
    pytest.param("iceberg", "postgresql", "local", id="iceberg-postgresql-in-process"),
]


def batch_history(state_url: str, consumer: str) -> list[Any]:
    store = open_store(state_url)
    try:
        return store.history(consumer, 1000)
    finally:
        store.close()


def _engine_env(engines: str, table: Table) -> dict[str, str]:
    """The children's ICETAIL_LOCAL_MAX_BYTES for `engines` (see COMBOS)."""
    if engines == "spark":
        return {}
    if engines == "local":
        return {"ICETAIL_LOCAL_MAX_BYTES": str(1 << 40)}
    sizes = [int((s.summary or {}).get("added-files-size", "0") or 0) for s in table.metadata.snapshots]
    pairs = sorted(a + b for a, b in zip(sizes[::2], sizes[1::2], strict=False))  # --max-snapshots-per-batch 2
    return {"ICETAIL_LOCAL_MAX_BYTES": str(pairs[len(pairs) // 2])}  # about half the batches each way


@pytest.mark.parametrize(("sink_kind", "state_kind", "engines"), COMBOS)
def test_sigkill_at_random_moments_delivers_every_change_exactly_once(
    crash_source: Source,
    sink_kind: str,
    state_kind: str,
    engines: str,
    tmp_path: Path,
    state_url_factory: Any,
    record_property: Any,
) -> None:
    state_url = state_url_factory(state_kind)
    sink = make_sink(sink_kind, tmp_path)
    consumer = f"crash-{sink_kind}-{state_kind}"
    catalogs = [crash_source.catalog] + ([sink.catalog] if sink.catalog is not None else [])
    env = child_env(catalogs, tmp_path / "spark", extra=_engine_env(engines, crash_source.table))
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", crash_source.catalog.name,
        "--table", crash_source.ident,
        "--state", state_url,
        "--sink", sink.url,
        "--consumer", consumer,
        "--until-caught-up",
        "--max-snapshots-per-batch", "2",
        "--chunk-rows", "100",
    ]  # fmt: skip
    if sink_kind == "iceberg":  # staged chunks committed in groups of >= 250 rows (commit_group.py)
        cmd += ["--sink-commit-rows", "250"]
    schema = crash_source.expected.schema
    expected = row_multiset(crash_source.expected, schema)
    rng = random.Random(f"{SEED}:{sink_kind}:{state_kind}" + ("" if engines == "spark" else f":{engines}"))
    schedule = kill_schedule(rng, KILLS)

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        got = row_multiset(rows, schema, partial=True)
        assert is_submultiset(got, expected), f"after run {attempt.index}:\n{diff_report(expected, got)}"
        state = attempt.state
        assert state is not None
        if state.exists:
            # every committed offset covers rows that are in the sink (sink first, offset second)
            assert attempt.sink_rows >= state.committed_rows, attempt.line()

    logs = tmp_path / "logs"
    report = crash_loop(
        cmd, env, state_url=state_url, consumer=consumer, sink=sink, schedule=schedule, logs=logs, check=check
    )
    summary = f"seed {SEED}, schedule {[str(t) for t in schedule]}\n{report.summary()}"
    record_property("crash_runs", summary)
    print(summary)

    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    # each batch's shape as written ahead: one for this process has no reconcile partitions
    history = batch_history(state_url, consumer)
    written_for = {"local" if h.shape.reconcile_partition_bytes is None else "spark" for h in history}
    assert written_for == ({"local", "spark"} if engines == "alternating" else {engines}), (written_for, summary)
    got = row_multiset(sink.read(), schema)
    assert not diff_report(expected, got), f"{diff_report(expected, got)}\n{summary}"
    state = view_state(state_url, consumer)
    assert state.cursor == crash_source.table.metadata.current_snapshot_id, state
    assert state.inflight_batch is None, state
    assert state.committed_rows == crash_source.expected.num_rows, state
    if sink.directory is not None:  # interrupted writes were cleaned up by the next open
        assert not list((sink.directory / "_tmp").rglob("*.parquet"))

    # the caught-up consumer: a further run delivers nothing and leaves the sink as it is
    before = sink.fingerprint()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr
    assert "caught up" in again.stderr, again.stderr
    assert sink.fingerprint() == before
    assert not diff_report(expected, row_multiset(sink.read(), schema))
    assert view_state(state_url, consumer).generation == state.generation
