"""The local handoff: tasks on the driver's host publish each chunk as a file the driver streams as it appears.

With a local master the tasks write Arrow IPC files into a folder on the driver's host (/dev/shm
when it has room, else the temporary directory: reader/spark/handoff_root.py) instead of
returning their rows through the JVM; the driver takes each file as soon as it is complete, while
the job still runs.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from icetail.kernel.errors import IcetailError, is_disk_full
from icetail.kernel.processes import host_tag, process_is_running
from icetail.reader.spark.handoff_root import SHM, handoff_root
from icetail.reader.spark.local_disk import handoff_full
from icetail.reader.spark.payloads import Payload, TaskErrorPayload
from icetail.reader.spark.tasks import run_partition
from icetail.reader.split.context import ReadContext
from icetail.sinks.base import ChunkStager


def take_published(path: str) -> Payload | None:
    """The payload published at `path` (the file is removed), or None when it is not there yet."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    os.unlink(path)
    payload: Payload = pickle.loads(data)
    return payload


def task_key(wave: int, task: int) -> str:
    return f"w{wave:06d}-t{task:05d}"


def publish_partition(
    context: ReadContext, part: Any, chunk_rows: int | None, stager: ChunkStager | None, handoff: str, key: str
) -> Iterator[int | TaskErrorPayload]:
    """Run the task's splits, publishing each chunk payload as `<key>-<seq>.chunk` the moment it is
    read, then `<key>.end`; yields the chunk count (Spark's result is only the job's completion), or
    the error that kept it from publishing (a full disk leaves no room for an error file)."""
    count = 0
    try:
        for payload in run_partition(context, part, chunk_rows, stager, handoff):
            _publish(os.path.join(handoff, f"{key}-{count:07d}.chunk"), pickle.dumps(payload))
            count += 1
        _publish(os.path.join(handoff, f"{key}.end"), b"")
    except OSError as exc:  # no file can carry the error now: it goes back as the task's result
        error = (
            handoff_full(os.path.dirname(handoff))
            if is_disk_full(exc)
            else IcetailError(f"cannot write icetail's handoff file in {handoff}: {exc}")
        )
        yield TaskErrorPayload(type(error).__module__, type(error).__name__, str(error))
        return
    yield count


def _publish(path: str, data: bytes) -> None:
    """Write then rename: the driver sees a whole file or none (no fsync: it is the same host's page cache)."""
    try:
        with open(path + ".tmp", "wb") as stream:
            stream.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path + ".tmp")  # a partial file of a full disk: its space back
        raise
    os.replace(path + ".tmp", path)


HANDOFF_PREFIX = "icetail-handoff-"
_orphans_removed = threading.Event()


def new_handoff_dir() -> str:
    """A fresh directory `icetail-handoff-<host>-<pid>-...` under `handoff_root()` (/dev/shm or TMPDIR).

    The first one of a process also removes those that drivers of this host left behind when
    they were killed (a SIGKILL skips every clean-up), in every place a driver may have chosen, so
    a crash loop cannot fill the disk or the memory.
    """
    root = handoff_root()
    if not _orphans_removed.is_set():
        _orphans_removed.set()
        for place in dict.fromkeys((root, tempfile.gettempdir(), SHM)):
            remove_orphaned_handoffs(place)
    return tempfile.mkdtemp(prefix=f"{HANDOFF_PREFIX}{host_tag()}-{os.getpid()}-", dir=root)


def remove_orphaned_handoffs(root: str) -> int:
    """Delete the handoff directories under `root` whose driver (a process of this host) is gone."""
    mine = f"{HANDOFF_PREFIX}{host_tag()}-"
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        pid = entry.name[len(mine) :].split("-", 1)[0] if entry.name.startswith(mine) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not process_is_running(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed


def executors_share_driver_host(sc: Any) -> bool:
    """A local master: executors run on the driver's host and see its temporary directory."""
    return str(sc.master).startswith("local")
