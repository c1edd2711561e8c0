"""Named moments of a run where a test may act: a seam the tests install, empty in production.

Product code marks a moment with `reached(moment, released)`; nothing happens unless a test
installed a hook for that moment. A test installs hooks in its own process with `install`, and in
the `icetail` processes it starts by naming, in ICETAIL_TEST_SEAMS, a module that installs them
when imported (tests/support/holds.py: hold the run while a file exists, so a test acts on a run
provably at that moment instead of racing it). What a test does at a moment thus lives with the
tests; production pays one environment look-up once and a dictionary look-up per moment.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

SEAMS_MODULE_ENV = "ICETAIL_TEST_SEAMS"  # a module imported at the first moment reached; it installs hooks
AFTER_CHUNK = "after_chunk"  # a chunk (group, partition) and its offset are committed (monitor/engine/delivery)
SESSION_START = "session_start"  # a BackgroundSession is about to ask for its JVM (reader/spark/background.py)

# `released(seconds)` waits up to that long and says whether to go on anyway (a stop was
# requested): what a hook that holds the run waits with
Released = Callable[[float], bool]
Hook = Callable[[Released], None]

_hooks: dict[str, Hook] = {}
_module_loaded = False


def install(moment: str, hook: Hook) -> None:
    """Run `hook` whenever `moment` is reached in this process (replacing a hook installed before)."""
    _hooks[moment] = hook


def reached(moment: str, released: Released) -> None:
    """The run is at `moment`: the hook installed for it runs (and may hold the run), else nothing."""
    global _module_loaded
    if not _module_loaded:
        name = os.environ.get(SEAMS_MODULE_ENV)
        if name:
            importlib.import_module(name)
        _module_loaded = True
    hook = _hooks.get(moment)
    if hook is not None:
        hook(released)
