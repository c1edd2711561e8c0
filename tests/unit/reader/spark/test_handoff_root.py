"""Where the local handoff goes (reader/spark/handoff_root.py): the user's directory, else a roomy /dev/shm.

Real directories of this machine stand in for /dev/shm; the free-space bound is set around the
free space they really have, so the rule is tested on both sides of it.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from icetail.kernel.errors import ConfigError, LocalDiskFullError
from icetail.kernel.settings import HANDOFF_DIR_ENV
from icetail.reader.spark import handoff_root as module
from icetail.reader.spark.handoff_root import handoff_root
from icetail.reader.spark.local_disk import spark_job_error


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def test_a_memory_filesystem_with_room_is_chosen_and_one_without_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(module, "SHM_MIN_FREE_BYTES", 1)
    assert handoff_root({}, str(shm)) == str(shm)
    monkeypatch.setattr(module, "SHM_MIN_FREE_BYTES", _free(shm) + 2**40)  # more than it has
    assert handoff_root({}, str(shm)) == tempfile.gettempdir()
    monkeypatch.setattr(module, "SHM_MIN_FREE_BYTES", 1)
    assert handoff_root({}, str(tmp_path / "absent")) == tempfile.gettempdir()


def test_the_users_directory_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(module, "SHM_MIN_FREE_BYTES", 1)
    chosen = str(tmp_path / "handoff")
    os.mkdir(chosen)
    assert handoff_root({HANDOFF_DIR_ENV: chosen, "TMPDIR": "/elsewhere"}, str(shm)) == chosen
    for variable in ("TMPDIR", "TEMP", "TMP"):  # a temporary directory the user set: not /dev/shm
        assert handoff_root({variable: str(tmp_path)}, str(shm)) == tempfile.gettempdir()
    assert handoff_root({HANDOFF_DIR_ENV: "  "}, str(shm)) == str(shm)


def test_the_default_here_is_a_real_place() -> None:
    root = handoff_root()
    assert os.path.isdir(root) and os.access(root, os.W_OK)


@pytest.mark.parametrize("name", ["missing", "a file", "../../etc/x\n; rm -rf /"])
def test_a_handoff_dir_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    target = tmp_path / name if "/" not in name else Path(str(tmp_path) + "/" + name)
    if name == "a file":
        target.write_text("not a folder")
    with pytest.raises(ConfigError) as raised:
        handoff_root({HANDOFF_DIR_ENV: str(target)})
    message = str(raised.value)
    assert HANDOFF_DIR_ENV in message and "create it, or unset the variable" in message and "\n" not in message
    assert not (tmp_path / "missing").exists()


def test_a_full_handoff_names_the_directory_the_job_wrote_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the place chosen again: a /dev/shm that filled up no longer has the room to be chosen."""
    used = tmp_path / "shm"
    used.mkdir()
    monkeypatch.setenv(HANDOFF_DIR_ENV, str(tmp_path))  # what choosing again would name
    failure = OSError(errno.ENOSPC, f"No space left on device: {used}/icetail-handoff-h-1-x/w000000-t00000.chunk")
    error = spark_job_error(failure, None, str(used / "icetail-handoff-h-1-x"))
    assert isinstance(error, LocalDiskFullError)
    assert f"in {used} (icetail's handoff" in str(error)
    assert f"in {tmp_path} (icetail's handoff" in str(spark_job_error(failure, None))
