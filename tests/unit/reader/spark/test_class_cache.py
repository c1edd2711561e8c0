"""The driver JVM's class cache (reader/spark/class_cache.py), with real JVMs in child processes.

One child's JVM writes the archive when it exits; the next start checks it and maps it (seen in the
JVM's /proc maps); a dump cut short, or a damaged archive, is removed and the start goes on without
it; nothing the JVM says about the archive reaches stdout, which may be a command's data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icetail.reader.spark.class_cache import CACHE_ENV, STRAY_SECONDS, ClassCache, class_cache, use_cache
from tests.support.jvm_starts import START, start_child, started
from tests.support.processes import child_env

pytestmark = pytest.mark.once  # one JVM's behaviour, the same on both lines: the Spark 4 line only

def _start(folder: Path, tmp_path: Path) -> tuple[dict[str, object], str]:
    """A child process's local session: (its JVM's pid and mapped archives, its whole stdout)."""
    done = start_child(child_env(spark_dir=tmp_path / "spark", extra={CACHE_ENV: str(folder)}), tmp_path)
    return started(done), done.stdout


def _gone(pid: int, timeout: float = 120.0) -> None:
    """Wait for a JVM to exit (a dumping one writes its archive after the child's Python is gone)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, f"JVM {pid} still running"
        time.sleep(0.2)


def _cache(folder: Path) -> ClassCache:
    found = class_cache({**os.environ, CACHE_ENV: str(folder)})
    assert found is not None
    return found


def test_one_start_writes_the_archive_the_next_maps_and_a_damaged_one_is_dropped(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    cache = _cache(folder)
    first, stdout = _start(folder, tmp_path)
    assert stdout.strip().count("\n") == 0, stdout  # the JVM's archive messages stay off stdout
    assert not any(str(folder) in m for m in first["mapped"])  # type: ignore[union-attr]
    _gone(int(first["jvm_pid"]))  # type: ignore[arg-type]
    record = json.loads(cache.dump_record.read_text())
    partial = cache.folder / record["partial"]
    assert record["jvm_pid"] == first["jvm_pid"] and partial.is_file() and not cache.archive.exists()

    second, _ = _start(folder, tmp_path)
    assert str(cache.archive) in second["mapped"], second  # checked, renamed, mapped
    assert not partial.exists() and not cache.dump_record.exists()

    # a JVM that dies at its start for another reason keeps a sound archive: here a second collector
    # (child_env's JDK_JAVA_OPTIONS choose the serial one) makes it refuse to start
    env = child_env(
        spark_dir=tmp_path / "spark", extra={CACHE_ENV: str(folder), "JAVA_TOOL_OPTIONS": "-XX:+UseParallelGC"}
    )
    failed = subprocess.run(
        [sys.executable, "-c", START], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert failed.returncode != 0 and "JAVA_GATEWAY_EXITED" in failed.stderr, failed.stderr[-2000:]
    assert cache.archive.is_file()

    # a damaged archive (a disk fault, a copy cut short) crashes the JVM that maps it: that start
    # drops it and starts again without, and becomes the next archive's writer
    whole = cache.archive.read_bytes()
    cache.archive.unlink()
    cache.archive.write_bytes(whole[: len(whole) // 3])
    third, _ = _start(folder, tmp_path)
    assert not any(str(folder) in m for m in third["mapped"]), third  # type: ignore[union-attr]
    assert not cache.archive.exists()


@pytest.mark.parametrize("cut_short", [False, True], ids=["whole", "cut-short"])
def test_a_finished_dump_is_checked_before_it_is_adopted(tmp_path: Path, cut_short: bool) -> None:
    """A dump whose JVM is gone: whole, its archive is adopted; cut short (the JVM killed while it
    wrote), it is deleted, never mapped. A bare `java -version` writes the archive here."""
    cache = _cache(tmp_path / "cache")
    partial = cache.partial("test")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={partial}", "-Xlog:cds=off", "-version"], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    if cut_short:
        whole = partial.read_bytes()
        partial.write_bytes(whole[: len(whole) // 2])
    # its JVM is gone: a pid above Linux's largest (pid_max is at most 2**22) never runs
    record = {"partial": partial.name, "python_pid": 0, "jvm_pid": 2**22 + 1, "jvm_started": "0",
              "java": shutil.which(java), "classpath": "", "options": []}  # fmt: skip
    cache.dump_record.write_text(json.dumps(record))
    use = use_cache(cache)
    assert cache.archive.exists() is not cut_short and not partial.exists()
    assert not list(cache.folder.glob("hs_err*")) and not list(Path.cwd().glob("hs_err*"))  # the check's crash
    if cut_short:  # this start writes the next one
        assert use.dumping == cache and "-XX:ArchiveClassesAtExit=" in use.java_options
    else:
        assert use.dumping is None and f"-XX:SharedArchiveFile={cache.archive}" in use.java_options


def test_only_one_of_many_starts_writes_the_archive(tmp_path: Path) -> None:
    cache = _cache(tmp_path / "cache")
    uses = [use_cache(cache) for _ in range(3)]
    assert [u.dumping is not None for u in uses] == [True, False, False]
    assert "-XX:ArchiveClassesAtExit=" in uses[0].java_options and uses[1].java_options == ""


def test_a_partial_archive_no_record_names_is_removed_once_old(tmp_path: Path) -> None:
    """A dump whose record was lost (removed while its JVM still wrote): its file goes after an hour."""
    cache = _cache(tmp_path / "cache")
    old, young = cache.partial("lost-old"), cache.partial("lost-young")
    for stray in (old, young):
        stray.write_bytes(b"part of an archive")
    os.utime(old, (time.time() - STRAY_SECONDS - 60,) * 2)
    use_cache(cache)
    assert not old.exists() and young.exists()


def test_turned_off_or_unwritable(tmp_path: Path) -> None:
    assert class_cache({**os.environ, CACHE_ENV: "off"}) is None
    assert class_cache({**os.environ, CACHE_ENV: str(tmp_path / "with space")}) is None
    blocked = tmp_path / "blocked"
    blocked.write_text("")  # a file where the folder should be: nothing to write, nothing to map
    assert class_cache({**os.environ, CACHE_ENV: str(blocked / "jvm")}) is None


def test_a_read_only_folder_with_an_archive_is_only_mapped(tmp_path: Path) -> None:
    """An image's build put the archive there; the service cannot write the folder (as root, whom a
    folder's mode does not stop, the folder is made immutable)."""
    folder = tmp_path / "image-cache"
    key = _cache(folder).key
    (folder / f"{key}.jsa").write_bytes(b"an archive")
    as_root = os.geteuid() == 0
    subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True) if as_root else folder.chmod(0o500)
    try:
        cache = class_cache({**os.environ, CACHE_ENV: str(folder)})
        assert cache is not None and not cache.writable
        use = use_cache(cache)
        assert use.dumping is None and f"-XX:SharedArchiveFile={cache.archive}" in use.java_options
        assert sorted(p.name for p in folder.iterdir()) == [f"{key}.jsa"]  # no dump lock written
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True, capture_output=True) if as_root else folder.chmod(
            0o700
        )
