"""`make demo` sets up the install users get (issue 48, "the first hour").

It ran on pyspark 3.5 (the test venv's pin, for the Java reference) while `pip install icetail`
resolves pyspark 4, so the Spark data source the README advertises failed from the Quick start's
venv; and its editable install in setuptools' compat mode printed the "compat editable mode is
transitional" warning. The demo's venv now takes the Spark 4 line's pins (requirements-dev.txt with
requirements-spark4.txt's pyspark) and installs icetail as a wheel.

Checked on the commands make would run (`make -n`, with the demo's venv in tmp_path so every step is
due): the constraints step runs for real and the pyspark it pins is read back. The README's data source
example itself runs on the Spark 4 line: tests/spark4/test_readme_example.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="runs `make -n demo`")


def _demo_commands(venv: Path) -> list[str]:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", f"DEMO_VENV={venv}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


# the checkout as pip's argument: `.` or `.[extras]`, quoted or not
CHECKOUT = re.compile(r"""(?:^|\s)['"]?\.(?:\[([^\]]*)\])?['"]?(?=\s|$)""")


def _install_lines(commands: list[str]) -> list[str]:
    """The pip commands that install icetail itself, not pip's own upgrade."""
    return [c for c in commands if "/pip install " in c and CHECKOUT.search(c)]


def test_the_demo_venv_gets_pyspark_4(tmp_path: Path) -> None:
    venv = tmp_path / "demo-venv"
    commands = _demo_commands(venv)
    constraints = venv / "constraints.txt"
    writes = [c for c in commands if c.rstrip().endswith(f"> {constraints}")]
    assert len(writes) == 1, commands
    venv.mkdir()
    subprocess.run(["/bin/sh", "-c", writes[0]], cwd=REPO, check=True)  # only writes into tmp_path
    pins = [
        line.split("==", 1)[1].strip() for line in constraints.read_text().splitlines() if line.startswith("pyspark==")
    ]
    spark4 = re.search(r"^pyspark==(\S+)", (REPO / "requirements-spark4.txt").read_text(), re.MULTILINE)
    assert spark4 and spark4.group(1).startswith("4."), "requirements-spark4.txt pins a pyspark 4"
    assert pins == [spark4.group(1)], pins  # the Spark 4 line's pin, and no other

    installs = _install_lines(commands)
    assert len(installs) == 1, commands
    assert installs[0].startswith(f"{venv}/bin/pip install ") and f" -c {constraints} " in installs[0], installs[0]
    extras = CHECKOUT.search(installs[0])
    assert extras and extras.group(1) == "postgres", installs[0]  # runtime dependencies and postgres, no test tools
    assert commands[-1] == f"{venv}/bin/icetail demo", commands


def test_the_demo_installs_a_wheel_not_a_compat_editable(tmp_path: Path) -> None:
    """No `-e`, no editable_mode: setuptools prints its "transitional" warning for compat mode only."""
    (install,) = _install_lines(_demo_commands(tmp_path / "demo-venv"))
    words = install.split()
    assert "-e" not in words and "--editable" not in words, install
    assert "editable_mode" not in install, install


def test_the_readme_runs_its_examples_with_the_demo_venv() -> None:
    """The Quick start's `make demo` is all the Python API and data source examples need."""
    venv = re.search(r"^DEMO_VENV \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert venv, "the Makefile names the demo's venv"
    readme = (REPO / "README.md").read_text()
    for section in ("## Python API", "## Spark data source"):
        intro = readme[readme.index(section) : readme.index("```python", readme.index(section))]
        assert "`make demo`" in intro and f"`{venv.group(1)}/bin/python`" in intro, intro
        assert "demo-spark4" not in intro, intro
    quick_start = readme[readme.index("## Quick start") : readme.index("## Install")]
    assert f"`{venv.group(1)}`" in quick_start and "pyspark 4" in quick_start, quick_start
