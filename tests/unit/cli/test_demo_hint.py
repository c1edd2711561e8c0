"""The demo's closing hint works pasted into a new shell (issue 25: it named a catalog that lived only in
the demo's own environment, and left out the demo's --identifier-columns)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import child_env, run_icetail

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)


def test_the_follow_hint_runs_in_a_new_shell(tmp_path: Path) -> None:
    demo = run_icetail(["demo", "--dir", str(tmp_path / "demo")], child_env(spark_dir=tmp_path / "spark"), timeout=600)
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout.splitlines()
    hint = out[out.index("follow it live, from any shell (catalog `demo` lives in these variables):") + 1 :]
    assert [line.split("=", 1)[0] for line in hint[:-1]] == [
        "  export PYICEBERG_CATALOG__DEMO__URI",
        "  export PYICEBERG_CATALOG__DEMO__WAREHOUSE",
    ]
    command = hint[-1]
    assert " serve --catalog demo --table shop.orders " in command and command.endswith(
        "--identifier-columns order_id"
    ), command
    # A new shell: nothing of the demo's environment, no venv on PATH. `run --once` stands in for
    # `serve`, which takes the same arguments and would not stop; the consumer is caught up.
    pasted = "\n".join([*hint[:-1], command.replace(" serve ", " run ", 1) + " --once"])
    harness = child_env(spark_dir=tmp_path / "spark")  # this checkout's code and the fast JVM options only
    shell_env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        **{k: harness[k] for k in ("PYTHONPATH", "JDK_JAVA_OPTIONS", "SPARK_LOCAL_DIRS")},
    }
    if os.environ.get("JAVA_HOME"):
        shell_env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    done = subprocess.run(
        ["/bin/sh", "-c", pasted], env=shell_env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "consumer demo.shop.orders: caught up, nothing to deliver" in done.stderr, done.stderr
