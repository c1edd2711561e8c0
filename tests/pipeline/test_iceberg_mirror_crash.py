"""The Iceberg mirror under SIGKILL: `icetail run` into `iceberg://CATALOG/NS.TABLE?mode=mirror`
killed at seeded moments (Spark start, a few ms after a group's commit landed - between it and the
offset commit - and later), restarted until it finishes. The source is the crash test's mixed
table (appends, copy-on-write deletes, an overwrite, a column added: the target follows it).
After every run in which the consumer is between batches, the target equals the source at its
cursor; after every run, no key is twice in the target and no chunk is in two of its snapshots
(the ledger in the snapshot summaries); at the end a further run changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.crash import Attempt, KillTrigger, crash_loop
from tests.support.mirror_checks import equal_between_batches, mirror_run_command
from tests.support.pg_mirror import row_set
from tests.support.processes import child_env
from tests.support.sinks import SinkSpec
from tests.support.stores import view_state
from tests.support.tables import build_mixed_table

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261126"))
IDENT = "ns.events"
TARGET = "tgt.events"
COLUMNS = ("id", "name", "amount", "note")


def _with_note(rows: pa.Table) -> pa.Table:
    return rows if "note" in rows.column_names else rows.append_column("note", pa.nulls(rows.num_rows, pa.string()))


def _source_at(cat: LocalCatalog, snapshot_id: int) -> list[tuple[Any, ...]]:
    return row_set(_with_note(cat.load(IDENT).scan(snapshot_id=snapshot_id).to_arrow()), COLUMNS)


def _chunks_committed(target: LocalCatalog) -> Counter[str]:
    """How many target snapshots name each chunk (exactly once: one each)."""
    table = target.try_load(TARGET)
    seen: Counter[str] = Counter()
    for snapshot in table.snapshots() if table is not None else []:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        for prop in ("icetail.chunk-id", "icetail.chunk-ids"):
            seen.update(name for name in summary.get(prop, "").split(",") if name)
    return seen


class MirrorTarget:
    """The target as crash_loop watches it (reads, fingerprint and probe as `SinkSpec`'s).

    A commit writes a new metadata file ("started": files written), then moves the catalog's pointer
    ("written": the version it points to); a kill in between is a commit that never happened. The
    window between the pointer's move and the offset commit is a millisecond, too short to hit by
    timing, so for a "replay" trigger the probe holds the state database's write lock from the moment
    a new metadata file appears, for `hold` seconds: the offset commit waits (a slow state store), the
    kill lands after the target's commit and before the offsets', and the next run replays the group.
    """

    def __init__(self, spec: SinkSpec, state_db: Path, hold: float = 1.0) -> None:
        self.spec, self.url, self.state_db, self.hold = spec, spec.url, state_db, hold
        self._files: int | None = None
        self.holds = 0

    def read(self) -> pa.Table | None:
        return self.spec.read()

    def fingerprint(self) -> tuple[Any, ...]:
        return self.spec.fingerprint()

    def probe(self, kind: str) -> int:
        files = self.spec.writes_done()
        if kind == "replay" and self._files is not None and files > self._files:
            self._hold_state()
        self._files = files
        return files if kind == "started" else self._pointer()

    def _pointer(self) -> int:
        assert self.spec.catalog is not None
        try:
            uri = f"file:{self.spec.catalog.root}/catalog.db?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
                row = db.execute(
                    "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
                    tuple(TARGET.split(".")),
                ).fetchone()
        except sqlite3.Error:  # busy, or not created yet
            return 0
        return int(Path(row[0]).name.split("-", 1)[0]) if row and row[0] else 0

    def _hold_state(self) -> None:
        if not self.state_db.exists():
            return
        db = sqlite3.connect(self.state_db, isolation_level=None, check_same_thread=False)
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # the run holds it this very moment: no hold this time
            db.close()
            return
        self.holds += 1

        def release() -> None:
            db.rollback()
            db.close()

        threading.Timer(self.hold, release).start()


def _schedule(rng: random.Random) -> list[KillTrigger]:
    """A first run's commits are the target's creation, its field-id map, then one per group (a
    schema change's too): the kills land a few ms after a group's commit landed (before or inside
    the offset commit), later, and at a random moment."""
    return [  # "replay" kinds first: MirrorTarget's probe counts files across calls
        KillTrigger("replay", rng.uniform(0.0, 0.005), rng.randint(3, 4)),
        KillTrigger("replay", rng.uniform(0.0, 0.005), rng.randint(1, 2)),
        KillTrigger("started", rng.uniform(0.0, 0.004), rng.randint(1, 2)),
        KillTrigger("written", rng.uniform(0.05, 0.5), rng.randint(1, 3)),
    ]


def test_sigkill_leaves_the_iceberg_mirror_exact(tmp_path: Path, record_property: Any) -> None:
    cat = new_catalog(tmp_path / "src", "mirrorcrash")
    table = build_mixed_table(cat, IDENT)
    target = new_catalog(tmp_path / "tgt", "mirrortgt")  # its own warehouse: the probe counts its commits
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    spec = SinkSpec("iceberg", f"iceberg://{target.name}/{TARGET}?mode=mirror", catalog=target, ident=TARGET)
    sink = MirrorTarget(spec, tmp_path / "state.db")
    consumer = "mirror"
    env = child_env([cat, target], tmp_path / "spark")
    cmd = mirror_run_command(cat.name, IDENT, state_url, sink.url, consumer)
    checked_between_batches = []
    replay_windows = []  # kills that left chunks of the batch in flight committed in the target

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        state = attempt.state
        assert state is not None
        chunks = _chunks_committed(target)
        twice = [c for c, n in chunks.items() if n > 1]
        assert not twice, f"chunks committed twice: {twice}; {attempt.line()}"
        ids = rows.column("id").to_pylist() if rows is not None else []
        assert len(ids) == len(set(ids)), f"a key twice in the target; {attempt.line()}"
        if equal_between_batches(cat, IDENT, COLUMNS, state, rows):
            checked_between_batches.append(attempt.index)
        elif state.inflight_batch is not None and any(f"-{state.inflight_batch}-" in c for c in chunks):
            replay_windows.append(attempt.index)

    loop = {"state_url": state_url, "consumer": consumer, "sink": sink, "logs": tmp_path / "logs", "check": check}
    report = crash_loop(cmd, env, schedule=_schedule(random.Random(SEED)), **loop)  # type: ignore[arg-type]
    summary = f"seed {SEED}; {sink.holds} state lock(s) held; kills after chunks of the batch in flight were "
    summary += f"committed: {replay_windows}\n{report.summary()}"
    record_property("crash_runs", summary)
    print(summary)
    assert not report.attempts[-1].killed and report.attempts[-1].returncode == 0, summary
    assert report.kills >= 3 and checked_between_batches and replay_windows, summary
    state = view_state(state_url, consumer)
    assert state.cursor == table.metadata.current_snapshot_id and state.inflight_batch is None, state
    rows = sink.read()
    assert rows is not None and "note" in rows.column_names, "the target follows the added column"
    assert row_set(rows, COLUMNS) == _source_at(cat, state.cursor), summary
    before = sink.fingerprint()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "caught up" in again.stderr, again.stderr
    assert sink.fingerprint() == before, "a further run commits nothing"
