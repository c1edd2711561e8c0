"""The command line's import budget: `--version`, `--help` and every error that needs only the
arguments load nothing but the standard library and icetail's own light modules.

Loading pyiceberg, pyarrow, SQLAlchemy or pyspark costs seconds under load; a user who mistyped a
flag must not pay for them. Each case runs the real console entry point in a fresh interpreter and
lists what it imported (a count of modules, not a timer: it holds on a busy machine too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ENTRY = """
import atexit, json, sys
listing = sys.argv.pop(1)
atexit.register(lambda: open(listing, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "icetail"
from icetail.monitor.cli.launch import entry
entry()
"""
# an interpreter's own start-up may load these outside the standard library (setuptools' hooks)
STARTUP = {"__main__", "_distutils_hack", "_virtualenv"}
RUN = ["--catalog", "c", "--table", "ns.t", "--state", "sqlite:///state.db", "--sink", "parquet:///tmp/x"]
# icetail's own modules that load the read path, the store or a sink's driver: never for an argument error
HEAVY = (
    "icetail.reader",
    "icetail.monitor.planning",
    "icetail.monitor.engine.pipeline",
    "icetail.monitor.engine.api",
    "icetail.sinks.registry",
    "icetail.sinks.base",
    "icetail.state.store",
)
CASES = {
    "version": (["--version"], 0),
    "help": (["--help"], 0),
    "changes help": (["changes", "--help"], 0),
    "run help": (["run", "--help"], 0),
    "serve help": (["serve", "--help"], 0),
    "unknown command": (["chnges"], 2),
    "unknown option": (["changes", "--tabel", "ns.t"], 2),
    "missing option": (["changes", "--catalog", "c"], 2),
    "not an integer": (["changes", "--catalog", "c", "--table", "ns.t", "--from-snapshot", "x", "--output", "-"], 2),
    "two bounds": (
        ["changes", "--catalog", "c", "--table", "ns.t", "--from-snapshot", "1", "--from-tag", "t", "--output", "-"],
        2,
    ),
    "bad timestamp": (["changes", "--catalog", "c", "--table", "ns.t", "--to-timestamp", "noon", "--output", "-"], 2),
    "net and carry-over": (
        ["changes", "--catalog", "c", "--table", "ns.t", "--net", "--keep-carry-over", "--output", "-"],
        2,
    ),
    "once and until": (["run", *RUN, "--once", "--until-caught-up"], 2),
    "bad start": (["run", *RUN, "--start", "yesterday"], 2),
    "bad verify": (["run", *RUN, "--verify", "loud"], 2),
    "bad sink url": (["run", *RUN[:6], "--sink", "nope://x"], 2),
    "unknown sink parameter": (["run", *RUN[:6], "--sink", "parquet:///tmp/x?mode=mirror"], 2),
    "bad state url": (["run", *RUN[:4], "--state", "mysql://h/db", *RUN[6:]], 2),
    "bad interval": (["serve", *RUN, "--interval", "5x"], 2),
    "missing config": (["serve", "--config", "/nonexistent/icetail.yaml"], 2),
    "reset without a change": (["reset", "--state", "sqlite:///state.db", "--consumer", "c"], 2),
    "reset to a bad sink": (["reset", "--state", "sqlite:///state.db", "--consumer", "c", "--sink", "nope://x"], 2),
    "reset to full": (["reset", "--state", "sqlite:///state.db", "--consumer", "c", "--to", "full"], 2),
}


def _outside_stdlib(modules: list[str]) -> list[str]:
    tops = {name.split(".")[0] for name in modules}
    return sorted(tops - set(sys.stdlib_module_names) - STARTUP - {"icetail"} - {t for t in tops if "editable" in t})


@pytest.mark.parametrize("case", sorted(CASES))
def test_argument_errors_import_only_the_standard_library(case: str, tmp_path: Path) -> None:
    argv, expected_exit = CASES[case]
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, str(listing), *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == expected_exit, done.stderr
    if argv == ["--version"]:
        assert done.stdout.startswith("icetail "), done.stdout
    if expected_exit == 2:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line naming the problem
    modules = json.loads(listing.read_text())
    assert _outside_stdlib(modules) == [], f"{case}: {done.stderr}"
    heavy = [m for m in modules if m.startswith(HEAVY)]
    assert heavy == [], case
    assert not list(tmp_path.glob("*.db")), "a refused command creates no store"


def test_a_command_that_runs_imports_its_read_path(tmp_path: Path) -> None:
    """The budget is real: the same harness sees pyiceberg once a command gets past its arguments."""
    listing = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", ENTRY, str(listing), "plan", "--catalog", "nope", "--table", "ns.t"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "pyiceberg" in _outside_stdlib(json.loads(listing.read_text()))


def test_the_light_choices_match_what_implements_them() -> None:
    from icetail.kernel.settings import VERIFY_MODES
    from icetail.monitor.engine.verify import VerifyMode

    assert VERIFY_MODES == tuple(mode.value for mode in VerifyMode)
