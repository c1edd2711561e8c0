"""Test holds: a run waits at a chosen moment (icetail/kernel/seams.py) while a file exists.

A test creates the file an environment variable names, waits for `<file>.held` (the moment is
reached), acts (a signal, a kill), then removes the file to let the process go on: an event to
wait on instead of a race with the clock. Without the variable nothing is held.

Importing this module installs the holds: in the test's own process (an in-process run), and in
an `icetail` child whose environment names it in ICETAIL_TEST_SEAMS (`hold_env`).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from icetail.kernel import seams

HOLD_POLL_SECONDS = 0.05  # how soon a removed hold file is noticed; no outcome depends on it
# while the file it names exists, every committed chunk (group, partition) is followed by a wait
# until a stop request or the file's removal, so a test can act on a batch that is certainly in
# progress (tests/service/test_serve_process.py, tests/pipeline/test_cli_leases.py)
HOLD_AFTER_CHUNK_ENV = "ICETAIL_TEST_HOLD_AFTER_CHUNK"
# while the file it names exists, a BackgroundSession's start waits before it asks for the JVM,
# so a test can stop a run whose session is provably still starting instead of racing the JVM's start
HOLD_SESSION_START_ENV = "ICETAIL_TEST_HOLD_SESSION_START"
HOLD_AT = {HOLD_AFTER_CHUNK_ENV: seams.AFTER_CHUNK, HOLD_SESSION_START_ENV: seams.SESSION_START}


def hold_env(variable: str, path: Path) -> dict[str, str]:
    """What an `icetail` child's environment needs to hold at `variable`'s moment while `path` exists."""
    return {seams.SEAMS_MODULE_ENV: __name__, variable: str(path)}


def hold_while_file(env: str, released: seams.Released) -> None:
    """While the file `env` names exists, wait; `released(seconds)` waits up to that long and says
    whether to go on anyway (a stop was requested)."""
    path = os.environ.get(env)
    if not path or not os.path.exists(path):
        return
    with open(path + ".held", "w", encoding="utf-8"):
        pass
    while os.path.exists(path) and not released(HOLD_POLL_SECONDS):
        pass


def install() -> None:
    """Hold at each moment while the file its variable names exists."""
    for variable, moment in HOLD_AT.items():
        seams.install(moment, partial(hold_while_file, variable))


install()
