"""The PostgreSQL mirror under SIGKILL: `icetail run` into the mirror killed at seeded moments
(startup, planning, Spark start, a few ms after a chunk's transaction committed - between it and
the offset commit - and at random), restarted until it finishes, state in SQLite and in
PostgreSQL. The source is the crash test's mixed table (appends, copy-on-write deletes, an
overwrite, a column added). After every run in which the consumer is between batches, the target
equals the source at its cursor; the ledger only ever holds chunks of the batch in flight or of
the last one; at the end the target equals the current table and a further run changes nothing.
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

from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.crash import Attempt, KillTrigger, crash_loop
from tests.support.mirror_checks import equal_between_batches, mirror_run_command
from tests.support.pg_mirror import ledger, mirror_url, query, row_set, target_table
from tests.support.processes import child_env
from tests.support.stores import view_state
from tests.support.tables import build_mixed_table

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261125"))
IDENT = "ns.events"
COLUMNS = ("id", "name", "amount", "note")


@dataclass(frozen=True)
class MirrorSpec:
    """The mirror target as crash_loop watches it: `written` grows with every chunk transaction."""

    schema: str
    url: str

    def probe(self, kind: str) -> int:
        try:
            rows = query(
                "SELECT coalesce(n_tup_ins, 0) FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                (self.schema, "icetail_mirror_ledger"),
            )
            live = query(f'SELECT count(*) FROM "{self.schema}".icetail_mirror_ledger')
        except Exception:  # not created yet
            return 0
        return max(int(rows[0][0]) if rows else 0, int(live[0][0]))

    def read(self) -> pa.Table | None:
        try:
            return target_table(self.schema)
        except Exception:
            return None


def _source_at(cat: LocalCatalog, snapshot_id: int) -> list[tuple[Any, ...]]:
    rows = cat.load(IDENT).scan(snapshot_id=snapshot_id).to_arrow()
    return row_set(_with_note(rows), COLUMNS)


def _with_note(rows: pa.Table) -> pa.Table:
    return rows if "note" in rows.column_names else rows.append_column("note", pa.nulls(rows.num_rows, pa.string()))


def _schedule(rng: random.Random) -> list[KillTrigger]:
    return [
        KillTrigger("time", rng.uniform(1.5, 5.0)),
        KillTrigger("written", rng.uniform(0.0, 0.003), 1),
        KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(2, 5)),
        KillTrigger("written", rng.uniform(0.0, 0.2), rng.randint(3, 8)),
    ]


@pytest.mark.parametrize("state_kind", ["sqlite", "postgresql"])
def test_sigkill_leaves_the_mirror_exact(
    tmp_path: Path, state_url_factory: Any, pg_schema: str, state_kind: str, record_property: Any
) -> None:
    cat = new_catalog(tmp_path / "src", "mirrorcrash")
    table = build_mixed_table(cat, IDENT)
    state_url = state_url_factory(state_kind)
    target = MirrorSpec(pg_schema, mirror_url(pg_schema))
    consumer = f"mirror-{state_kind}"
    env = child_env([cat], tmp_path / "spark")
    cmd = mirror_run_command(cat.name, IDENT, state_url, target.url, consumer)
    checked_between_batches = []

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        state = attempt.state
        assert state is not None
        batches = {batch for _, batch in ledger(pg_schema)} if rows is not None else set()
        assert len(batches) <= 1, f"the ledger holds several batches: {batches}; {attempt.line()}"
        if equal_between_batches(cat, IDENT, COLUMNS, state, rows):
            checked_between_batches.append(attempt.index)

    report = crash_loop(
        cmd,
        env,
        state_url=state_url,
        consumer=consumer,
        sink=target,  # type: ignore[arg-type]
        schedule=_schedule(random.Random(f"{SEED}:{state_kind}")),
        logs=tmp_path / "logs",
        check=check,
    )
    summary = f"seed {SEED}\n{report.summary()}"
    record_property("crash_runs", summary)
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    assert report.kills >= 1, summary
    state = view_state(state_url, consumer)
    assert state.cursor == table.metadata.current_snapshot_id and state.inflight_batch is None, state
    assert row_set(_with_note(target_table(pg_schema)), COLUMNS) == _source_at(cat, state.cursor), summary
    before = row_set(target_table(pg_schema), COLUMNS), ledger(pg_schema)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "caught up" in again.stderr, again.stderr
    assert (row_set(target_table(pg_schema), COLUMNS), ledger(pg_schema)) == before
