"""The JVM class cache written ahead of time, as the image's build does: one real run, its archive adopted.

    python -m icetail.reader.spark.class_cache_build FOLDER [COMMAND ...]

runs COMMAND (default: `icetail demo` in a scratch folder: a plan, a pipeline run on Spark, the
classes a service loads; ICETAIL_LOCAL_MAX_BYTES=0 so that its small batches read on Spark, not in
process) with ICETAIL_JVM_CLASS_CACHE=FOLDER. Its local JVM writes the archive of
the classes it loaded as it exits (class_cache.py); this waits for that JVM, has the archive checked
and adopted as any later start would, and fails unless FOLDER then holds it: an image built without
its cache should not pass for one with it. A service that cannot write FOLDER (the image's user)
only maps the archive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from icetail.kernel.settings import LOCAL_MAX_BYTES_ENV
from icetail.reader.spark.class_cache import CACHE_ENV, class_cache, process_alive, use_cache

WAIT_SECONDS = 600.0  # a dumping JVM writes ~150 MB after its Python is gone


def build(folder: Path, command: Sequence[str]) -> Path:
    """Run `command` with the cache at `folder`, then adopt the archive its JVM wrote; its path."""
    # every batch on Spark unless the caller says otherwise: the point is a JVM that loads what a service does
    env = {LOCAL_MAX_BYTES_ENV: "0", **os.environ, CACHE_ENV: str(folder)}
    cache = class_cache(env)
    if cache is None or not cache.writable:
        raise SystemExit(f"class_cache_build: {folder} is not a folder this process can write")
    if cache.archive.is_file():
        raise SystemExit(f"class_cache_build: {cache.archive} exists already; remove it to build it again")
    scratch = Path(tempfile.mkdtemp(prefix="icetail-class-cache-"))
    try:
        subprocess.run(list(command), env=env, cwd=scratch, check=True, stdout=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        record = json.loads(cache.dump_record.read_text())
    except (OSError, ValueError):
        raise SystemExit(
            f"class_cache_build: `{' '.join(command)}` started no JVM that wrote a class cache "
            "(does this Java have a base CDS archive? `java -Xshare:on -version` says)"
        ) from None
    deadline = time.monotonic() + WAIT_SECONDS
    while process_alive(int(record.get("jvm_pid", 0)), record.get("jvm_started")):
        if time.monotonic() > deadline:
            raise SystemExit(f"class_cache_build: the JVM {record['jvm_pid']} still writes after {WAIT_SECONDS:.0f} s")
        time.sleep(0.2)
    use_cache(cache)  # checks the finished archive and adopts it
    if not cache.archive.is_file():
        raise SystemExit(f"class_cache_build: the JVM's archive failed its check; {folder} holds none")
    return cache.archive


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0]).resolve()
    default = [sys.executable, "-m", "icetail", "demo", "--dir", "demo"]
    archive = build(folder, list(argv[1:]) or default)
    print(f"class_cache_build: {archive} ({archive.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
