"""The driver JVM's classes from a cache on disk: a local Spark starts in about half the time.

A local Spark's JVM loads, parses and verifies ~12,700 classes before its first job (pyspark 4.3),
most of a cold command's wait. Java 13+ can write the classes a JVM loaded to an archive when it
exits (`-XX:ArchiveClassesAtExit`, a CDS dynamic archive) and map them into later JVMs
(`-XX:SharedArchiveFile`): measured, a session start plus its first job took 7-10 s instead of
15-17 s (bench/RESULTS.md R57). The cache is kept per Java and pyspark install (the key), in
ICETAIL_JVM_CLASS_CACHE (a folder; `off` turns it off), else $XDG_CACHE_HOME/icetail/jvm,
else ~/.cache/icetail/jvm; an archive is ~150 MB. A folder icetail cannot write is only read: an
archive put there beforehand (by an image's build) is mapped, none is written.

How an archive comes to be, safely among processes started at once:
- no archive: the process that creates `KEY.dump.json` exclusively gives its JVM
  `-XX:ArchiveClassesAtExit=KEY.<its own token>.partial.jsa` (never a file another JVM writes), and
  records there, once the JVM is up, its pid, start time, classpath and options; the others start
  without a cache;
- a later start finds the dump's JVM gone and checks the partial archive with a `java -Xshare:on`
  of the same classpath and options before renaming it to `KEY.jsa`: a JVM killed while writing
  leaves a truncated file, which crashes a JVM that maps it (SIGBUS), so it is deleted instead;
- an archive the JVM cannot use (another classpath, other flags) is skipped by the JVM itself
  (`-Xshare:auto`), quietly (`-Xlog:cds=off`: its warnings go to stdout, which may be the data).
Nothing here may fail a start: every error means starting without the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icetail.kernel.processes import process_is_running
from icetail.reader.spark.java_runtime import java_binary

CACHE_ENV = "ICETAIL_JVM_CLASS_CACHE"
DUMP_OPTION = "-XX:ArchiveClassesAtExit="
OFF = frozenset({"off", "0", "false", "no"})
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
CHECK_SECONDS = 60.0
ABANDONED_SECONDS = 600.0  # a dump lock whose process never recorded its JVM (it failed to start)
STRAY_SECONDS = 3600.0  # a partial archive no dump record names (its record was lost): removed after this


@dataclass(frozen=True)
class ClassCache:
    """One install's archive and its dump's lock in the cache folder."""

    folder: Path
    key: str
    writable: bool = True  # else an archive put there beforehand (an image's) is only mapped

    @property
    def archive(self) -> Path:
        return self.folder / f"{self.key}.jsa"

    def partial(self, token: str) -> Path:
        return self.folder / f"{self.key}.{token}.partial.jsa"

    @property
    def dump_record(self) -> Path:
        return self.folder / f"{self.key}.dump.json"

    @property
    def archive_record(self) -> Path:
        """The adopted archive's java, classpath and options: what a later check runs it with."""
        return self.folder / f"{self.key}.json"


@dataclass(frozen=True)
class CacheUse:
    """What a start does with the cache: the JVM options to add, and whether its JVM writes the archive."""

    java_options: str
    dumping: ClassCache | None = None
    mapped: ClassCache | None = None  # the cache whose archive the JVM is told to map


def class_cache(environ: Mapping[str, str] | None = None) -> ClassCache | None:
    """The cache of this Java and pyspark, or None (turned off, no java found, a folder neither to write
    nor with an archive to read)."""
    env = os.environ if environ is None else environ
    setting = env.get(CACHE_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    if setting:
        folder = Path(setting).expanduser()
    else:
        base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = Path(base) / "icetail" / "jvm"
    key = _install_key(env)
    if key is None or any(ch.isspace() for ch in str(folder)):  # Spark splits the JVM's options at spaces
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if folder.is_dir() and os.access(folder, os.W_OK):
        return ClassCache(folder, key)
    read_only = ClassCache(folder, key, writable=False)
    return read_only if read_only.archive.is_file() else None


def use_cache(cache: ClassCache) -> CacheUse:
    """The options of a JVM about to start: map the archive, or write it at exit, or neither."""
    try:
        if cache.writable:
            _adopt_finished_dump(cache)
        if cache.archive.is_file():
            return CacheUse(f"-XX:SharedArchiveFile={cache.archive} -Xshare:auto {QUIET}", mapped=cache)
        if not cache.writable:
            return CacheUse("")
        fd = os.open(cache.dump_record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:  # another process writes the archive, or the folder went away
        return CacheUse("")
    partial = cache.partial(f"{os.getpid()}-{secrets.token_hex(4)}")
    with os.fdopen(fd, "w") as f:
        json.dump({"python_pid": os.getpid(), "created": time.time(), "partial": partial.name}, f)
    return CacheUse(f"-XX:ArchiveClassesAtExit={partial} {QUIET}", dumping=cache)


def record_dumping_jvm(cache: ClassCache, spark: Any) -> None:
    """Once the dumping JVM is up: what a later start needs to know it is gone and to check its archive."""
    try:
        jvm = spark.sparkContext._jvm
        system = jvm.java.lang.System
        runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        pid = int(runtime.getPid())
        arguments = [str(a) for a in runtime.getInputArguments()]  # one round trip to the JVM
        partial = next(a for a in arguments if a.startswith(DUMP_OPTION))
        record = {
            "partial": os.path.basename(partial.split("=", 1)[1]),
            "python_pid": os.getpid(),
            "created": time.time(),
            "jvm_pid": pid,
            "jvm_started": _process_start(pid),
            "java": os.path.join(str(system.getProperty("java.home")), "bin", "java"),
            "classpath": str(system.getProperty("java.class.path")),
            "options": [a for a in arguments if not a.startswith(DUMP_OPTION)],
        }
        temporary = cache.dump_record.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record))
        os.replace(temporary, cache.dump_record)
    except Exception:  # noqa: BLE001 - the cache is an optimization: a later start cleans up
        return


def _adopt_finished_dump(cache: ClassCache) -> None:
    """A finished dump's partial archive, checked, becomes the archive; a failed one is removed."""
    _remove_strays(cache)
    try:
        seen = cache.dump_record.stat()
        record = json.loads(cache.dump_record.read_text())
    except (OSError, ValueError):
        return
    if "jvm_pid" not in record:  # the JVM is not up yet, or never came up
        if (
            process_alive(int(record.get("python_pid", 0)))
            and time.time() - record.get("created", 0) < ABANDONED_SECONDS
        ):
            return
    elif process_alive(record["jvm_pid"], record.get("jvm_started")):
        return  # still running, or writing the archive now
    partial = cache.folder / os.path.basename(str(record.get("partial", "")))
    if partial.name.endswith(".partial.jsa"):  # never another file of the folder
        if "jvm_pid" in record and partial.is_file() and _usable(partial, record):
            cache.archive_record.write_text(json.dumps(record))
            os.replace(partial, cache.archive)
        partial.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        now = cache.dump_record.stat()
        if (now.st_ino, now.st_mtime_ns) == (seen.st_ino, seen.st_mtime_ns):  # not a newer dump's record
            cache.dump_record.unlink()


def _remove_strays(cache: ClassCache) -> None:
    """Partial archives whose record was lost (removed while their JVM still wrote): old ones go."""
    for stray in cache.folder.glob(f"{cache.key}.*.partial.jsa"):
        with contextlib.suppress(OSError):
            if time.time() - stray.stat().st_mtime > STRAY_SECONDS:
                stray.unlink()


def archive_is_damaged(cache: ClassCache) -> bool:
    """After a JVM died at its start with the archive mapped: was it the archive? (Another cause, a
    bad option or no memory, must not cost every later start its cache.)"""
    try:
        record = json.loads(cache.archive_record.read_text())
    except (OSError, ValueError):
        return True  # nothing to check it with: as if damaged
    return cache.archive.is_file() and not _usable(cache.archive, record)


def _usable(archive: Path, record: Mapping[str, Any]) -> bool:
    """Does a JVM of the dump's java, classpath and options map `archive`? `-Xshare:on` fails if not."""
    command = [
        record["java"],
        *record["options"],
        f"-XX:SharedArchiveFile={archive}",
        "-Xshare:on",
        "-XX:ErrorFile=/dev/null",  # a damaged archive crashes this check: no hs_err file in anyone's folder
        *QUIET.split(),
        "-cp",
        record["classpath"],
        "-version",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")}
    try:
        done = subprocess.run(
            command, env=env, cwd=archive.parent, capture_output=True, timeout=CHECK_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _install_key(env: Mapping[str, str]) -> str | None:
    """The Java (binary and its class library, by path, size and time) and pyspark (version, path)."""
    java = java_binary(env)
    if java is None:
        return None
    try:
        import pyspark

        java = os.path.realpath(java)
        modules = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "modules")
        parts = [java, pyspark.__version__, os.path.dirname(os.path.realpath(pyspark.__file__))]
        for path in (java, modules):
            if os.path.exists(path):
                stat = os.stat(path)
                parts += [str(stat.st_size), str(stat.st_mtime_ns)]
    except (ImportError, OSError):
        return None
    return "spark-" + str(pyspark.__version__) + "-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), to tell it from a later one of the same pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, started: str | None = None) -> bool:
    """Process `pid` runs, and (given its `started` time) is the one that started then, not a later one of its pid."""
    if pid <= 0 or not process_is_running(pid):
        return False
    return started is None or _process_start(pid) in (None, started)
