"""A `keyed-repair` trial: SIGKILL or SIGTERM inside a repair by a direct diff (docs/delivery.md,
"Repair by a direct diff").

A `--protect-cursor` consumer catches up with the table's first snapshot before the writer
starts (its cursor is then tagged `icetail-chaos`); the writer commits its changes; the harness
expires every snapshot but the head and the tagged cursor (pyiceberg's `expire_snapshots`), so
the chain from the head back to the cursor is broken (`chain_expired`) and the next run repairs
by a direct diff, as one collapsed batch (`-d1`). That run is hurt right after its first
committed chunk or partition (`ICETAIL_TEST_HOLD_AFTER_CHUNK`, moments.py; the reconcile in
partitions of `--reconcile-partition-bytes 4096`), 1..max_faults times, then a run finishes.
The check: the first snapshot's INSERTs exactly once, then exactly the difference between the
cursor snapshot and the head (rows at the head and not at the cursor as INSERTs, the reverse as
DELETEs, all carrying the head's snapshot id), and a collapsed batch in the consumer's history;
a mirror equal to the head; a history holding the first snapshot's versions, closed or replaced
at the head as if the head were the next snapshot (the repair's one collapsed batch).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from bench.chaos.faults import FaultShot
from bench.chaos.moments import MomentWatch
from bench.chaos.places import HISTORIES
from bench.chaos.plan import KEYED_FAULTS, TrialSpec
from bench.chaos.source import IDENT
from bench.chaos.trial import CONSUMER, TrialConfig, TrialResult, TrialRunner
from bench.chaos.verify import (
    Change,
    Verdict,
    compare,
    expected_changes,
    expected_history,
    history_versions,
    own_rows,
    pyiceberg_rows,
    row_counts,
    sink_changes,
)
from icetail.state.store import open_store
from tests.support.processes import child_env
from tests.support.stores import view_state

TAG = f"icetail-{CONSUMER}"


class RepairTrialRunner(TrialRunner):
    def __init__(self, spec: TrialSpec, config: TrialConfig, work: Path) -> None:
        super().__init__(spec, config, work)
        self.watch = MomentWatch("chunk", self.work / "hold" / "hold", self.sink, self.store.direct_url, CONSUMER)
        self.cursor0: int | None = None
        self.before: Counter[Change] = Counter()

    def command(self) -> list[str]:
        return [*super().command(), "--protect-cursor", "--reconcile-partition-bytes", "4096"]

    def run(self) -> TrialResult:
        started = time.monotonic()
        try:
            self.writer.create()
            env = child_env([self.source], self.work / "spark", extra=self.sink.env())
            runs = [self.run_once(0, None, env)]  # before the writer: the cursor is the first snapshot
            if runs[0].returncode != 0:
                self.findings.append(f"run 0 failed without a fault: {runs[0].last_line}")
            self.writer.start()
            self.writer.join()
            self.expire()
            planned = self.rng.randint(1, self.config.max_faults)
            for index in range(1, self.config.max_runs):
                shot = None
                if index <= planned:
                    shot = FaultShot(self.rng.choice(KEYED_FAULTS), 0.0, moment="repair")
                record = self.run_once(index, shot, env)
                runs.append(record)
                if shot is None and record.returncode == 0:
                    break
                if (shot is None or not record.fired) and record.returncode != 0:
                    self.findings.append(f"run {index} failed without a fault: {record.last_line}")
            else:
                self.findings.append(f"not caught up after {self.config.max_runs} runs")
            self.findings.extend(f"writer: {e}" for e in self.writer.errors)
            verdict, caught_up = self.check()
            return TrialResult(
                self.spec, tuple(runs), verdict, caught_up, time.monotonic() - started, tuple(self.findings)
            )
        finally:
            self.close()

    def expire(self) -> None:
        """Every snapshot but the head and the tagged cursor expired; the changes up to the cursor
        are computed first (their snapshots go)."""
        state = view_state(self.store.direct_url, CONSUMER)
        table = self.source.load(IDENT)
        if state.cursor is None or TAG not in table.metadata.refs:
            self.findings.append(f"no cursor ({state.cursor}) or no tag {TAG} after the first run")
            return
        self.cursor0 = state.cursor
        columns = [f.name for f in table.schema().fields]
        self.before = expected_changes(table, state.cursor, columns)
        kept = {ref.snapshot_id for ref in table.metadata.refs.values()}
        doomed = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in kept]
        if doomed:
            table.maintenance.expire_snapshots().by_ids(doomed).commit()

    def check(self) -> tuple[Verdict | None, bool]:
        table = self.source.load(IDENT)
        head = table.metadata.current_snapshot_id
        state = view_state(self.store.direct_url, CONSUMER)
        caught_up = state.cursor == head and state.inflight_batch is None
        if not caught_up:
            self.findings.append(f"not caught up: {state}")
        if self.cursor0 is None or head is None:
            return None, caught_up
        columns = [f.name for f in table.schema().fields]
        at_cursor = row_counts(table.scan(snapshot_id=self.cursor0).to_arrow(), columns)
        at_head = row_counts(table.scan(snapshot_id=head).to_arrow(), columns)
        if self.sink.kind in HISTORIES:  # the first snapshot's versions, then the head's diff as one snapshot's
            expected = expected_history(table, [self.cursor0, head], columns, pyiceberg_rows(table))
            return compare(expected, history_versions(own_rows(self.sink.read()), columns)), caught_up
        if self.sink.keyed:
            return compare(at_head, row_counts(own_rows(self.sink.read()), columns)), caught_up
        expected = self.before.copy()
        expected.update(Counter({("I", head, row): n for row, n in (at_head - at_cursor).items()}))
        expected.update(Counter({("D", head, row): n for row, n in (at_cursor - at_head).items()}))
        got, torn = sink_changes(self.sink, columns)
        with open_store(self.store.direct_url) as store:
            if not any(h.shape.collapsed for h in store.history(CONSUMER)):
                self.findings.append("no collapsed (repair) batch in the consumer's history")
        return compare(expected, got, torn=torn), caught_up
