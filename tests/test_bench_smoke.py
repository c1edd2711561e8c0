"""The benchmark runner at its tiny size, so it cannot rot: it runs and prints ratios.

No timing is asserted (a shared 2-core machine makes any bound flaky); the numbers that matter
come from `python -m bench.run --scale small|default`, recorded in bench/RESULTS.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.java
def test_bench_runner_tiny(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "bench.run",
        "--scale",
        "tiny",
        "--workdir",
        str(tmp_path / "bench"),
        "--cases",
        "append,planning,recovery",
        "--history",
        "2,4",
        "--repeat",
        "1",
        "--skip-java",
        "--driver-memory",
        "1g",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "== summary: ratios" in done.stdout, output[-4000:]
    for name in ("vs_raw_pyarrow", "to_driver/vs_raw_pyarrow", "full_vs_icetail", "icetail_h4_vs_h2"):
        assert re.search(rf"{name}\s+[0-9.]+x", done.stdout), f"no ratio {name} in:\n{done.stdout[-4000:]}"
    assert "== goals" in done.stdout
    assert list((tmp_path / "bench").glob("results-tiny-*.json"))
