"""Whose lease may be taken over at once: only a gone process of this host and this PID namespace.

Found by the image smoke: two `serve` containers on the host's network share the host's name and
both run icetail as pid 1; each took the other's pid-1 lease for a previous run of its own and took
its live leases over, until one stopped on its fenced writes. Real PID namespaces here (`unshare`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from icetail.kernel.processes import host_name, lease_holder_is_dead, pid_namespace, process_token
from tests.support.processes import REPO_ROOT

# in a new PID namespace (as pid 1): its own lease owner, and what it judges of the owners it is given
JUDGE = """
import json, sys
from icetail.monitor.engine.lease import run_owner
from icetail.kernel.processes import lease_holder_is_dead
print(json.dumps({"owner": run_owner(), "dead": [lease_holder_is_dead(o) for o in sys.argv[1:]]}), flush=True)
sys.stdin.read()  # runs until its stdin closes: a live container
"""


def _in_new_pid_namespace(*owners: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A process as pid 1 of a new PID namespace, still running, and what it printed."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a new PID namespace needs unshare as root")
    child = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", JUDGE, *owners],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the child in a new PID namespace printed nothing (exit {child.wait(timeout=60)})"
    return child, dict(json.loads(line))


def test_a_pid_1_of_another_namespace_is_never_taken_for_a_previous_run() -> None:
    first, said = _in_new_pid_namespace()
    try:
        owner = str(said["owner"])
        assert owner.startswith(f"{host_name()}:1:") and pid_namespace() not in owner
        # a second container on the same host (a new namespace, pid 1 again) judges the first's owner
        # while the first runs: before, "our own pid with another token" made it dead, and its live
        # leases were taken over
        second, judged = _in_new_pid_namespace(owner)
        second.communicate(timeout=60)
        assert judged["dead"] == [False]
        # from the host's namespace, it is not judged either (its pid 1 is not the host's pid 1)
        assert not lease_holder_is_dead(owner)
    finally:
        first.communicate(timeout=60)


def test_in_one_namespace_a_gone_pid_or_an_older_token_of_this_pid_is_dead() -> None:
    here = host_name()
    gone = subprocess.Popen(["true"])
    gone.wait()
    namespace = process_token().partition(".")[2]
    assert namespace == pid_namespace() != ""
    assert lease_holder_is_dead(f"{here}:{gone.pid}:deadbeef.{namespace}")
    assert lease_holder_is_dead(f"{here}:{os.getpid()}:deadbeef.{namespace}")  # this pid, another process
    assert not lease_holder_is_dead(f"{here}:{os.getppid()}:deadbeef.{namespace}")  # runs
    assert not lease_holder_is_dead(f"{here}:{gone.pid}:deadbeef.1")  # another namespace: not judged
    assert not lease_holder_is_dead(f"another-host:{gone.pid}:deadbeef.{namespace}")
    assert lease_holder_is_dead(f"{here}:{gone.pid}:deadbeef")  # a token written before tokens named it
