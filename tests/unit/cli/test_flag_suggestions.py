"""A misspelt flag is answered with the flag meant, in one line, exit status 2 (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import child_env, run_icetail

CASES = [
    (["changes", "--catalog", "c", "--tabel", "ns.t", "--output", "-"], "icetail changes", "--tabel", "--table"),
    (["changes", "--catalog", "c", "--tabel=ns.t", "--output", "-"], "icetail changes", "--tabel", "--table"),
    (
        ["changes", "--catalog", "c", "--table", "ns.t", "--output", "-", "--idenifier-columns", "a"],
        "icetail changes",
        "--idenifier-columns",
        "--identifier-columns",
    ),
    (["plan", "--catalog", "c", "--table", "ns.t", "--jsn"], "icetail plan", "--jsn", "--json"),
    (
        ["run", "--catalog", "c", "--table", "ns.t", "--state", "sqlite:///s.db", "--snik", "-"],
        "icetail run",
        "--snik",
        "--sink",
    ),
    (["status", "--stae", "sqlite:///s.db"], "icetail status", "--stae", "--state"),
]


@pytest.mark.parametrize(("argv", "prog", "typo", "meant"), CASES, ids=[c[2] + "-" + c[0][0] for c in CASES])
def test_misspelt_flag_suggests_the_flag_meant(
    tmp_path: Path, argv: list[str], prog: str, typo: str, meant: str
) -> None:
    done = run_icetail(argv, child_env(), timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines() == [f"{prog}: error: unknown option {typo}; did you mean {meant}?"]
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_unknown_flag_without_a_close_one(tmp_path: Path) -> None:
    done = run_icetail(["changes", "--catalog", "c", "--table", "ns.t", "--output", "-", "--xyzzy"], child_env())
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["icetail changes: error: unknown option --xyzzy; see icetail changes --help"]


def test_misspelt_command_suggests_the_command_meant(tmp_path: Path) -> None:
    done = run_icetail(["chnges", "--catalog", "c"], child_env(), timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines() == ["icetail: error: unknown command 'chnges'; did you mean changes?"]
