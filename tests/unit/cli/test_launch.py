"""The `icetail` command's SIGTERM handler is in place before icetail's own imports (launch.py).

A supervisor's SIGTERM while the command still imports used to end the process without a line
(chaos harness, issue 26 finding 10). The stop is delivered at a chosen moment, deterministically:
an import hook sends the real signal to its own process when the command's main module is about
to be imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from icetail.monitor.cli.launch import STOPPED_EXIT_CODE, STOPPED_LINE

SIGTERM_AT_IMPORT = """
import os, signal, sys

TARGET = sys.argv[1]

class SigtermAt:
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, SigtermAt())
sys.argv = ["icetail", "--version"]
from icetail.monitor.cli.launch import entry

entry()
"""


@pytest.mark.parametrize("module", ["icetail.monitor.cli.main", "icetail.kernel.errors", "icetail._version"])
def test_a_sigterm_while_the_command_imports_ends_in_one_line(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", SIGTERM_AT_IMPORT, module], capture_output=True, text=True, timeout=60)
    assert out.returncode == STOPPED_EXIT_CODE, out.stderr
    assert out.stderr.splitlines() == [STOPPED_LINE]
    assert out.stdout == ""


SIGTERM_AT_EXIT = """
import atexit, os, signal, sys, time

def stop_while_exiting():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)  # the signal is handled (or not) before the teardown goes on

atexit.register(stop_while_exiting)
sys.argv = ["icetail", *sys.argv[1:]]
from icetail.monitor.cli.launch import entry

entry()
"""


@pytest.mark.parametrize(
    ("argv", "code"), [(["--version"], 0), (["status", "--state", "sqlite:////nonexistent/x.db"], 2)]
)
def test_a_sigterm_after_the_command_ended_keeps_its_exit_status_and_lines(argv: list[str], code: int) -> None:
    """A stop while the interpreter tears down (the command said its last line) is ignored: the
    exit status is the command's, and nothing is added to its output (it used to raise into an
    atexit callback, or end the process by signal 15 silently: chaos harness, issue 26)."""
    out = subprocess.run([sys.executable, "-c", SIGTERM_AT_EXIT, *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == (0 if code == 0 else 1), out.stderr


def test_the_launcher_imports_nothing_of_icetail_but_its_packages() -> None:
    """What runs before the handler is installed: the package roots only, no pyspark, no metadata."""
    probe = (
        "import sys; import icetail.monitor.cli.launch; "
        "print(sorted(m for m in sys.modules if m.startswith('icetail') or m in ('pyspark', 'importlib.metadata')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == str(
        ["icetail", "icetail.monitor", "icetail.monitor.cli", "icetail.monitor.cli.launch"]
    )


ALLOCATOR_AT_IMPORT = """
import os, sys

class Report:
    def find_spec(self, name, path=None, target=None):
        if name == "icetail.monitor.cli.main":  # the command's first heavy import
            print(os.environ.get("MIMALLOC_PURGE_DELAY"), "pyarrow" in sys.modules)
        return None

sys.meta_path.insert(0, Report())
sys.argv = ["icetail", "--version"]
from icetail.monitor.cli.launch import entry

entry()
"""


@pytest.mark.parametrize(("users", "seen"), [(None, "60000"), ("250", "250")], ids=["default", "users-own"])
def test_the_allocators_purge_delay_is_set_before_pyarrow_loads(users: str | None, seen: str) -> None:
    """mimalloc reads MIMALLOC_PURGE_DELAY once, when pyarrow loads: the command sets a minute before any
    import of its own (kernel/settings.py says why), and leaves a value the user set."""
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    if users is not None:
        env["MIMALLOC_PURGE_DELAY"] = users
    command = [sys.executable, "-c", ALLOCATOR_AT_IMPORT]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"{seen} False"
