"""Test seams that hold the process at a chosen moment while a file exists.

A test creates the file an environment variable names, waits for `<file>.held` (the moment is
reached), acts (a signal, a kill), then removes the file to let the process go on: an event to
wait on instead of a race with the clock. Without the variable nothing is held.
"""

from __future__ import annotations

import os
from collections.abc import Callable

HOLD_POLL_SECONDS = 0.05  # how soon a removed hold file is noticed; no outcome depends on it


def hold_while_file(env: str, released: Callable[[float], bool]) -> None:
    """While the file `env` names exists, wait; `released(seconds)` waits up to that long and says
    whether to go on anyway (a stop was requested)."""
    path = os.environ.get(env)
    if not path or not os.path.exists(path):
        return
    with open(path + ".held", "w", encoding="utf-8"):
        pass
    while os.path.exists(path) and not released(HOLD_POLL_SECONDS):
        pass
