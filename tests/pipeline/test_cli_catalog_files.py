"""A SQL catalog on SQLite with a wrong path is a setup mistake, not an outage (issue 48, "the first hour").

SQLite says "unable to open database file" or "file is not a database" without a path, and icetail
passed that on as a transient "catalog is unreachable" (exit 1, which `serve` retries forever). Each
mistake is refused in one line naming the path and the fix, exit 2, and nothing is left behind: no
checkpoint store, no catalog database, no sink. Real `icetail run` children on real pyiceberg SQL
catalogs; no Spark starts on these paths.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.pipeline.run_cli_support import assert_one_line_error
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.processes import child_env, icetail_command

NAME = "mine"
VARIABLE = "PYICEBERG_CATALOG__MINE__URI"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def _catalog(root: Path) -> LocalCatalog:
    """A real catalog under `root` holding the empty table ns.t (nothing to deliver: no Spark starts)."""
    cat = new_catalog(root, NAME)
    cat.catalog().create_namespace("ns")
    cat.catalog().create_table("ns.t", schema=SCHEMA)
    return cat


def _run(
    work: Path, uri: str, *, cwd: Path | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`icetail run` from catalog `mine` at `uri` into a store and a sink under `work`."""
    env = {**child_env(), VARIABLE: uri, "PYICEBERG_CATALOG__MINE__WAREHOUSE": f"file://{work}/warehouse"}
    args = ["run", "--catalog", NAME, "--table", "ns.t", "--state", f"sqlite:///{work}/state.db",
            "--sink", f"parquet://{work}/sink", "--consumer", "c", "--once"]  # fmt: skip
    return subprocess.run(
        [*prefix, *icetail_command(), *args], env=env, cwd=cwd or work, capture_output=True, text=True, timeout=300
    )


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_missing_catalog_folder_is_refused_not_retried(tmp_path: Path) -> None:
    result = _run(tmp_path, f"sqlite:///{tmp_path}/nodir/cat.db")
    assert_one_line_error(result, 2, "catalog 'mine'", f"folder {tmp_path}/nodir does not exist", VARIABLE)
    assert _tree(tmp_path) == []  # no folder made, no store, no sink


def test_three_slashes_meant_as_an_absolute_catalog_path_get_the_four_slash_form(tmp_path: Path) -> None:
    """The checkpoint store's hint (issue 25), from the same check: `sqlite:///tmp/...` is `./tmp/...`."""
    work = tmp_path / "work"
    work.mkdir()
    relative = f"{tmp_path.relative_to('/').as_posix()}/cat.db"
    result = _run(work, f"sqlite:///{relative}", cwd=work)
    assert_one_line_error(
        result, 2, f"folder {work}/{Path(relative).parent} does not exist", f"write four slashes: sqlite:////{relative}"
    )
    assert _tree(tmp_path) == ["work"]


def test_a_missing_catalog_file_is_refused_not_created(tmp_path: Path) -> None:
    """pyiceberg would create an empty catalog there, and the run then said the *table* does not exist
    (check --table) and left the stray database behind: the table cannot be in a catalog that was not
    there, so the path is what is wrong and what the line names."""
    result = _run(tmp_path, f"sqlite:///{tmp_path}/cat.db")
    assert_one_line_error(result, 2, "catalog 'mine'", f"{tmp_path}/cat.db does not exist", VARIABLE)
    assert _tree(tmp_path) == []


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    notes = tmp_path / "catalog.yaml"
    notes.write_text("catalog:\n  mine:\n    uri: sqlite:////var/lib/cat.db\n" * 10)
    before = notes.read_bytes()
    result = _run(tmp_path, f"sqlite:///{notes}")
    assert_one_line_error(result, 2, "catalog 'mine'", f"{notes} is not a SQLite database", VARIABLE)
    assert notes.read_bytes() == before
    assert _tree(tmp_path) == ["catalog.yaml"]


@pytest.fixture
def unprivileged() -> tuple[str, ...]:
    """The prefix that runs a child without root's power over file modes: none for another user; for root,
    a new user namespace (`unshare --user`), where root keeps its uid but none of its capabilities."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--user", "true"]).returncode:
        pytest.skip("running as root, and no user namespace (unshare --user) to drop root's file access")
    return ("unshare", "--user")


@contextlib.contextmanager
def _mode(path: Path, mode: int) -> Iterator[None]:
    """`path` with `mode` for the block, its own mode again after it (so pytest can remove it)."""
    before = path.stat().st_mode & 0o777
    path.chmod(mode)
    try:
        yield
    finally:
        path.chmod(before)


@pytest.mark.parametrize(
    ("locked", "mode"), [("catalog.db", 0o000), (".", 0o600)], ids=["file-unreadable", "folder-unsearchable"]
)
def test_a_catalog_the_user_cannot_read_says_so(
    tmp_path: Path, unprivileged: tuple[str, ...], locked: str, mode: int
) -> None:
    cat = _catalog(tmp_path / "cat")
    work = tmp_path / "work"
    work.mkdir()
    before = _tree(cat.root)
    with _mode(cat.root / locked, mode):
        result = _run(work, cat.uri, prefix=unprivileged)
    assert_one_line_error(
        result, 2, "catalog 'mine'", f"permission denied reading {cat.root}/catalog.db", "read access"
    )
    assert _tree(cat.root) == before and _tree(work) == []


def test_a_catalog_folder_sqlite_cannot_write_says_so(tmp_path: Path, unprivileged: tuple[str, ...]) -> None:
    """A catalog in WAL mode is opened by writing its index (`-shm`) beside it: a read-only folder
    refuses that, and SQLite's "unable to open database file" read as an outage."""
    cat = _catalog(tmp_path / "cat")
    with sqlite3.connect(cat.root / "catalog.db") as db:
        assert db.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    db.close()
    work = tmp_path / "work"
    work.mkdir()
    before = _tree(cat.root)
    with _mode(cat.root, 0o500):
        result = _run(work, cat.uri, prefix=unprivileged)
    assert_one_line_error(result, 2, "catalog 'mine'", f"folder {cat.root} is not writable", "write access")
    assert _tree(cat.root) == before and _tree(work) == []


def test_a_read_only_folder_is_enough_for_a_catalog_that_is_only_read(
    tmp_path: Path, unprivileged: tuple[str, ...]
) -> None:
    """The check is no broader than the failure: a catalog in the default journal mode is read from a
    folder icetail cannot write (a read-only mount), as before."""
    cat = _catalog(tmp_path / "cat")
    work = tmp_path / "work"
    work.mkdir()
    with _mode(cat.root, 0o500):
        result = _run(work, cat.uri, prefix=unprivileged)
    assert result.returncode == 0, result.stderr
    assert "caught up, nothing to deliver" in result.stderr, result.stderr
