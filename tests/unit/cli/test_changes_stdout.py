"""`icetail changes` without `--output` writes JSON lines to standard output, as `tail -f` would (issue 48):
the same bytes as `--output -`, nothing else on stdout, and `--output FILE` still overrides it.

Real `icetail` children on the small pyiceberg table, read in their own process (`--engine local`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.processes import REPO_ROOT, icetail_command
from tests.support.small_table import SmallTable


def _changes(cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # the small table's catalog is in this environment
    args = ["changes", "--catalog", "core", "--table", "ns.t", "--engine", "local", *flags]
    return subprocess.run([*icetail_command(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_changes_without_output_writes_json_lines_to_stdout(small_table: SmallTable, tmp_path: Path) -> None:
    work = tmp_path / "work"  # the table's catalog is in tmp_path itself
    work.mkdir()
    default = _changes(work)
    assert default.returncode == 0, default.stderr
    rows = [json.loads(line) for line in default.stdout.splitlines()]  # every stdout line is a change row
    kinds = sorted((r["id"], r["_change_type"]) for r in rows)
    assert kinds == [(1, "INSERT"), (2, "DELETE"), (2, "INSERT"), (3, "INSERT"), (4, "INSERT"), (5, "INSERT")]
    assert default.stdout.endswith("\n")
    assert list(work.iterdir()) == []  # no file written

    dash = _changes(work, "--output", "-")
    assert dash.returncode == 0, dash.stderr
    assert dash.stdout == default.stdout

    to_file = _changes(work, "--output", "out.jsonl")
    assert to_file.returncode == 0, to_file.stderr
    assert to_file.stdout == ""  # --output overrides stdout
    assert (work / "out.jsonl").read_text() == default.stdout
