"""Faults a run meets, and when: a seeded delay after the run starts.

`sigkill` kills the run's whole process group (driver, Spark JVM, Python workers): nothing can
print. `sigterm` signals the driver only, as a supervisor (systemd, Kubernetes) stopping it
does, then waits a grace period before killing what is left. `pg-cut` drops every PostgreSQL
connection of the run (state store and/or mirror sink go through the proxy) and refuses new ones
for a while, as a server restart would; the run is then left to fail or ride it out. The S3
sinks' server, behind its own proxy: `s3-stop` (stopped: connections cut and refused for 1-10 s),
`s3-slow` (for 4-15 s every answer held 3.5-8 s: past the AWS SDK's 3 s request timeout),
`s3-503` (every request answered `503 SlowDown` for 1-10 s). `catalog-lock`: another process holds
the source catalog's SQLite file in `BEGIN EXCLUSIVE` for 2-20 s (a writer committing slowly).
`reset-sink`: a SIGKILL, then `icetail reset --sink` to a second sink before the next run.
`disk-full-sink` / `disk-full-state`: the small filesystem under the sink folder / the SQLite
checkpoint store is filled to the last byte (it is emptied before the next run).
`keyed-kill` / `keyed-term`: SIGKILL / SIGTERM at an observed moment of a batch (moments.py);
`keyed-repair` is either inside a repair by direct diff (repair.py).
`sink-writer`: a second process appends rows of its own to the Iceberg sink's target table
every 0.3-1.2 s while the run commits there (sink_writer.py), and in half the trials the run is
also killed (SIGKILL of the group) at the seeded moment.
`reset-to` and `verify-strict` hurt no run: the first is `icetail reset --to` an earlier snapshot
after a run that caught up, the second a snapshot whose summary lies (trial.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.disk import SmallDisk
from bench.chaos.proxy import CuttableProxy
from tests.support.crash import kill_group

SIGTERM_GRACE = 20.0  # seconds a run gets to stop after SIGTERM (Kubernetes' default is 30)


@dataclass(frozen=True)
class FaultShot:
    """One fault of one run: `kind` fired `delay` s after the run started; `down` s of outage (pg-cut)."""

    kind: str
    delay: float
    down: float = 0.0  # how long the fault lasts (pg-cut, the S3 faults)
    hold: float = 0.0  # s3-slow: how long each answer is held
    moment: str = ""  # keyed faults: the moment of the batch (moments.py)
    kill: bool = False  # sink-writer: a SIGKILL at `delay` as well

    def __str__(self) -> str:
        if self.kind == "sink-writer":
            return f"sink-writer+kill at {self.delay:.1f}s" if self.kill else "sink-writer"
        if self.moment:
            return f"{self.kind} at {self.moment}"
        if self.kind in ("reset-to", "verify-strict"):
            return self.kind
        extra = f", for {self.down:.1f}s" if self.down else ""
        extra += f", answers held {self.hold:.1f}s" if self.hold else ""
        return f"{self.kind} at {self.delay:.1f}s{extra}"


def draw(kind: str, rng: random.Random, horizon: float) -> FaultShot:
    """A moment between the first import and about the end of a typical run (`horizon` s)."""
    moment = rng.uniform(0.3, horizon)
    if kind == "pg-cut":
        return FaultShot(kind, moment, rng.uniform(0.5, 3.0))
    if kind in ("s3-stop", "s3-503"):
        return FaultShot(kind, moment, rng.uniform(1.0, 10.0))
    if kind == "s3-slow":
        return FaultShot(kind, moment, rng.uniform(4.0, 15.0), rng.uniform(3.5, 8.0))
    if kind == "catalog-lock":
        return FaultShot(kind, moment, rng.uniform(2.0, 20.0))
    if kind == "sink-writer":
        return FaultShot(kind, moment, kill=rng.random() < 0.5)
    if kind in ("keyed-kill", "keyed-term", "keyed-repair", "reset-to", "verify-strict"):
        return FaultShot(kind, 0.0)  # at a moment observed, or none at all
    return FaultShot(kind, moment)


HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@dataclass
class Targets:
    """What a trial's faults act on besides the run itself."""

    proxy: CuttableProxy | None = None  # PostgreSQL
    s3proxy: CuttableProxy | None = None
    catalog_db: Path | None = None  # the source catalog's SQLite file
    disk: SmallDisk | None = None  # under the sink or the state
    lockers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def settle(self) -> None:
        """Until every fault is over (an outage, a held lock, a full disk): the next run starts clean."""
        for proxy in (self.proxy, self.s3proxy):
            if proxy is not None:
                proxy.wait_up()  # the previous run's cut may outlast it (seen with seed 27, trial 2)
        for locker in self.lockers:
            locker.wait()
        self.lockers.clear()
        if self.disk is not None and self.disk.full:
            self.disk.free()

    def lock_catalog(self, seconds: float) -> str:
        assert self.catalog_db is not None
        locker = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(self.catalog_db), str(seconds)], stdout=subprocess.PIPE
        )
        self.lockers.append(locker)
        assert locker.stdout is not None
        started = time.monotonic()
        line = locker.stdout.readline()  # BEGIN EXCLUSIVE waits for a commit in progress (timeout 60 s)
        return f"catalog locked after {time.monotonic() - started:.1f}s" if line else "lock not taken"


def fire(shot: FaultShot, proc: subprocess.Popen[Any], targets: Targets) -> str:
    """Inject `shot` into the running `proc`; a note of what happened."""
    if shot.kind == "sink-writer":
        if not shot.kill:
            return "a second writer committing to the target"
        kill_group(proc)
        return "killed while a second writer commits to the target"
    if shot.kind in ("sigkill", "reset-sink", "keyed-kill"):
        kill_group(proc)
        return "killed, then icetail reset --sink" if shot.kind == "reset-sink" else "killed"
    if shot.kind in ("sigterm", "keyed-term"):
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return "already gone"
        try:
            proc.wait(SIGTERM_GRACE)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return f"ignored SIGTERM for {SIGTERM_GRACE:.0f}s, killed"
        return "terminated"
    proxy, s3proxy = targets.proxy, targets.s3proxy
    if shot.kind == "pg-cut":
        assert proxy is not None
        return f"{proxy.cut(shot.down)} connections cut"
    if shot.kind == "catalog-lock":
        return targets.lock_catalog(shot.down)
    if shot.kind.startswith("disk-full"):
        assert targets.disk is not None
        return targets.disk.fill()
    if shot.kind.startswith("s3-"):
        assert s3proxy is not None
        if shot.kind == "s3-stop":
            return f"{s3proxy.cut(shot.down)} connections cut"
        if shot.kind == "s3-slow":
            return f"{s3proxy.slow(shot.down, shot.hold)} connections slowed"
        return f"{s3proxy.throttle(shot.down)} connections cut, then 503"
    raise ValueError(shot.kind)
