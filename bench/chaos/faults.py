"""Faults a run meets, and when: a seeded delay after the run starts.

`sigkill` kills the run's whole process group (driver, Spark JVM, Python workers): nothing can
print. `sigterm` signals the driver only, as a supervisor (systemd, Kubernetes) stopping it
does, then waits a grace period before killing what is left. `pg-cut` drops every PostgreSQL
connection of the run (state store and/or mirror sink go through the proxy) and refuses new ones
for a while, as a server restart would; the run is then left to fail or ride it out. The S3
sinks' server, behind its own proxy: `s3-stop` (stopped: connections cut and refused for 1-10 s),
`s3-slow` (for 4-15 s every answer held 3.5-8 s: past the AWS SDK's 3 s request timeout),
`s3-503` (every request answered `503 SlowDown` for 1-10 s).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

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

    def __str__(self) -> str:
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
    return FaultShot(kind, moment)


def fire(
    shot: FaultShot, proc: subprocess.Popen[Any], proxy: CuttableProxy | None, s3proxy: CuttableProxy | None = None
) -> str:
    """Inject `shot` into the running `proc`; a note of what happened."""
    if shot.kind == "sigkill":
        kill_group(proc)
        return "killed"
    if shot.kind == "sigterm":
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
    if shot.kind == "pg-cut":
        assert proxy is not None
        return f"{proxy.cut(shot.down)} connections cut"
    if shot.kind.startswith("s3-"):
        assert s3proxy is not None
        if shot.kind == "s3-stop":
            return f"{s3proxy.cut(shot.down)} connections cut"
        if shot.kind == "s3-slow":
            return f"{s3proxy.slow(shot.down, shot.hold)} connections slowed"
        return f"{s3proxy.throttle(shot.down)} connections cut, then 503"
    raise ValueError(shot.kind)
