"""The `icetail` command's first step: the SIGTERM handler, installed before icetail is imported.

A supervisor's SIGTERM can come at any moment, also while the interpreter imports the command
(tens of milliseconds on an idle host, a few hundred under load), and Python's default action
then ends the process without a word. This module imports nothing but the standard library's
`os`, `signal` and `sys`, so the handler is in place before any of icetail's own imports; a stop while
they run ends in the same one line as a stop later. Only the interpreter's own start-up, before
this module runs, is left to the default action (nothing is opened or held by then).
"""

from __future__ import annotations

import os
import signal
import sys

STOPPED_LINE = "icetail: stopped by SIGTERM; the next run resumes a batch in flight"
STOPPED_EXIT_CODE = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM (a supervisor stopping the process), raised wherever the command is.

    It unwinds as Ctrl-C does: a run's checkpoint is exact at every point (it survives SIGKILL),
    and on the way out the lease is released, so the next run starts at once instead of waiting
    for the lease to expire, and the command ends in one line instead of dying silently.
    """


# set by the handler: a Terminated that a library swallowed (a bare `except:` around an optional
# import, say) still ends the command as stopped, once it returns
_received: list[int] = []


def on_sigterm(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the unwinding short
    _received.append(signum)
    raise Terminated(signal.Signals(signum).name)


def stopped() -> int:
    """Say the process was stopped by SIGTERM; its exit status."""
    print(STOPPED_LINE, file=sys.stderr)
    return STOPPED_EXIT_CODE


def entry() -> None:
    """The console script: the handler first, then the command (icetail/monitor/cli/main.py)."""
    # `serve` replaces this with its own graceful stop (icetail/monitor/service/scheduler.py)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        from icetail.kernel.settings import PURGE_DELAY_ENV, PURGE_DELAY_MS

        # before pyarrow loads, which reads it once (settings.py says why); the user's value wins
        os.environ.setdefault(PURGE_DELAY_ENV, PURGE_DELAY_MS)
        from icetail.monitor.cli import main

        code = main.run_command()
        if _received and code == 0:  # the stop was swallowed on its way up: the run went on to its end
            code = stopped()
    except Terminated:
        code = stopped()
    finally:
        # The command is over and its last line written. A stop during the interpreter's teardown
        # (~0.5 s: pyspark, threads, modules) changes nothing, so it is ignored: a Python handler
        # would raise into an atexit callback, and Python restores the default action for its
        # handlers late in the teardown (an exit by signal 15, silent). SIG_IGN outlives that.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)
