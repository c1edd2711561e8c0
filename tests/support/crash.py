"""Crash loops: run `icetail run` over and over, SIGKILLing its process group by a seeded schedule."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.compare import diff_report, is_submultiset, row_multiset
from tests.support.processes import REPO_ROOT
from tests.support.sinks import SinkSpec
from tests.support.stores import StateView, expire_dead_lease, view_state


@dataclass(frozen=True)
class KillTrigger:
    """When to SIGKILL a run: `delay` s after launch ("time"), or `delay` s after `steps` more sink
    writes began ("started": lands inside a sink write) or landed ("written": with a delay of a
    few ms, lands between the sink write and the offset commit, or inside the commit)."""

    kind: str  # time | started | written
    delay: float
    steps: int = 0

    def __str__(self) -> str:
        if self.kind == "time":
            return f"at {self.delay:.2f}s"
        return f"{self.delay * 1000:.0f}ms after {self.steps} sink writes {self.kind}"


def kill_schedule(rng: random.Random, kills: int, *, horizon: float = 25.0) -> list[KillTrigger]:
    """Seeded kill moments covering startup, store, planning, Spark start, reading, sink write, commit.

    The first two hit early: imports and state migration (< 1.5 s), then consumer creation,
    planning, the write-ahead batch and Spark's start (1.5-5 s). The next two are keyed to sink
    writes: a few ms after the run's first sink write began (inside the write), then a few ms
    after a later write landed (before or inside its offset commit). The rest are a seeded mix
    of all three kinds, with longer delays, over the whole run (reading included).
    """
    fixed = [
        KillTrigger("time", rng.uniform(0.0, 1.5)),
        KillTrigger("time", rng.uniform(1.5, 5.0)),
        KillTrigger("started", rng.uniform(0.0, 0.02), 1),
        KillTrigger("written", rng.uniform(0.0, 0.003), rng.randint(1, 4)),
    ]
    plan = fixed[:kills]
    while len(plan) < kills:
        pick = rng.random()
        if pick < 0.3:
            plan.append(KillTrigger("time", rng.uniform(0.0, horizon)))
        elif pick < 0.55:
            plan.append(KillTrigger("started", rng.uniform(0.0, 0.05), rng.randint(1, 6)))
        elif pick < 0.8:
            plan.append(KillTrigger("written", rng.uniform(0.0, 0.005), rng.randint(1, 6)))
        else:
            plan.append(KillTrigger("written", rng.uniform(0.05, 1.0), rng.randint(1, 10)))
    return plan


def _group_alive(pgid: int) -> bool:
    """Does any non-zombie process of process group `pgid` still exist?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the run's whole process group (driver, JVM, Python workers) and wait until it is gone."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 20
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process group {pgid} survived SIGKILL")
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.05)


@dataclass
class Attempt:
    index: int
    trigger: KillTrigger | None  # None: the final run, left to finish
    killed: bool
    returncode: int
    seconds: float
    stderr: str
    state: StateView | None = None
    sink_rows: int = 0
    note: str = ""

    def line(self) -> str:
        what = f"killed {self.trigger}" if self.killed else f"exited {self.returncode}"
        state = self.state.stage if self.state else "?"
        committed = self.state.committed_rows if self.state else 0
        extra = f"; {self.note}" if self.note else ""
        return (
            f"run {self.index}: {what} after {self.seconds:.2f}s; {state}; "
            f"sink {self.sink_rows} rows, {committed} committed{extra}"
        )


def run_once(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    trigger: KillTrigger | None,
    probe: Callable[[str], int],
    log_path: Path,
    timeout: float,
) -> tuple[bool, int, float, str]:
    """One run of `cmd`; killed per `trigger` unless it exits first. (killed, returncode, seconds, stderr)."""
    with open(log_path, "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen(
            list(cmd), env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        killed = False
        try:
            keyed = trigger is not None and trigger.kind != "time"
            baseline = probe(trigger.kind) if keyed and trigger is not None else 0
            fire_at: float | None = started + trigger.delay if trigger is not None and trigger.kind == "time" else None
            while proc.poll() is None:
                now = time.monotonic()
                if now - started > timeout:
                    kill_group(proc)
                    raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout}s; log: {log_path}")
                if keyed and trigger is not None and fire_at is None:
                    if probe(trigger.kind) >= baseline + trigger.steps:
                        fire_at = now + trigger.delay
                if fire_at is not None and now >= fire_at:
                    kill_group(proc)
                    killed = True
                    break
                time.sleep(0.0005 if keyed else 0.005)  # the sink-write-to-commit window is ~1-3 ms
        finally:
            if proc.poll() is None:
                kill_group(proc)
        seconds = time.monotonic() - started
        if not killed:
            # the run ended on its own: make sure nothing of it lingers (e.g. a JVM)
            kill_group(proc)
    return killed, proc.returncode, seconds, log_path.read_text(errors="replace")


@dataclass
class CrashReport:
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(1 for a in self.attempts if a.killed)

    def summary(self) -> str:
        return "\n".join(a.line() for a in self.attempts)


def crash_loop(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    state_url: str,
    consumer: str,
    sink: SinkSpec,
    schedule: Sequence[KillTrigger],
    logs: Path,
    check: Callable[[Attempt, pa.Table | None], None] | None = None,
    between: Callable[[Attempt], None] | None = None,
    timeout: float = 300,
    final_timeout: float = 600,
) -> CrashReport:
    """Run `cmd` once per trigger, killing it, then once more to completion; `check` after each run.

    A run that exits on its own before its kill moment ends the loop when it exits 0 (caught up)
    and fails it otherwise (its output is in the assertion). After each kill the dead run's lease
    is released, as its expiry would, and `between` runs (e.g. a concurrent writer's commit).
    """
    logs.mkdir(parents=True, exist_ok=True)
    report = CrashReport()
    triggers: list[KillTrigger | None] = [*schedule, None]
    for index, trigger in enumerate(triggers):
        killed, returncode, seconds, output = run_once(
            cmd,
            env,
            trigger=trigger,
            probe=sink.probe,
            log_path=logs / f"run{index:03d}.log",
            timeout=final_timeout if trigger is None else timeout,
        )
        attempt = Attempt(index, trigger, killed, returncode, seconds, output)
        if killed:
            owner = expire_dead_lease(state_url, consumer)
            attempt.note = "" if owner else "no lease held"
        rows = sink.read()
        attempt.state = view_state(state_url, consumer)
        attempt.sink_rows = 0 if rows is None else rows.num_rows
        report.attempts.append(attempt)
        if check is not None:
            check(attempt, rows)
        if killed and between is not None:
            between(attempt)
        if not killed:
            if returncode != 0:
                raise AssertionError(
                    f"run {index} exited {returncode} on its own:\n{output[-3000:]}\nso far:\n{report.summary()}"
                )
            break
    return report


def assert_exactly_once_under_kills(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    state_url: str,
    consumer: str,
    sink: Any,
    expected_rows: pa.Table,
    current_snapshot_id: int | None,
    schedule: list[KillTrigger],
    logs: Path,
    label: str,
    record: Callable[[str, str], None] | None = None,
) -> CrashReport:
    """Kill `cmd` on `schedule` until a run finishes. After every run the sink holds a sub-multiset
    of `expected_rows` and at least the rows the checkpoint says were committed; at the end exactly
    `expected_rows`, the cursor at `current_snapshot_id`, nothing in flight, and at least one kill."""
    schema = expected_rows.schema
    expected = row_multiset(expected_rows, schema)

    def check(attempt: Attempt, rows: pa.Table | None) -> None:
        got = row_multiset(rows, schema, partial=True)
        assert is_submultiset(got, expected), f"after run {attempt.index}:\n{diff_report(expected, got)}"
        state = attempt.state
        assert state is not None
        if state.exists:
            assert attempt.sink_rows >= state.committed_rows, attempt.line()

    report = crash_loop(
        cmd, env, state_url=state_url, consumer=consumer, sink=sink, schedule=schedule, logs=logs, check=check
    )
    summary = f"{label}, schedule {[str(t) for t in schedule]}\n{report.summary()}"
    if record is not None:
        record("crash_runs", summary)
    print(summary)
    final = report.attempts[-1]
    assert not final.killed and final.returncode == 0, summary
    assert report.kills >= 1, summary
    got = row_multiset(sink.read(), schema)
    assert not diff_report(expected, got), f"{diff_report(expected, got)}\n{summary}"
    state = view_state(state_url, consumer)
    assert state.cursor == current_snapshot_id and state.inflight_batch is None, state
    assert state.committed_rows == expected_rows.num_rows, state
    return report
