"""Where the local handoff's files go: a memory filesystem with room to spare, else the temporary directory.

Every row a local Spark task reads is written into a handoff file and read back by the driver
within a second, then deleted. On a disk filesystem those writes pay for the host's other writers:
the kernel throttles every writer while dirty pages pile up, and the journal serializes them. With
a disk writer beside it the workers' system CPU went from 0.2 to 0.3-0.8 s a round and a warm
8M-row read took 0.93-1.05 s instead of 0.75-0.77 s on /dev/shm, whose pages are never written
back (R67). Ray keeps its object store on /dev/shm for the same reason, under the same rule: only
where it has room.

The order: ICETAIL_HANDOFF_DIR; else TMPDIR (or TEMP, TMP) when the user set one (their choice of
scratch space, and the fix the disk-full error names); else /dev/shm when it is writable and has at
least SHM_MIN_FREE_BYTES free; else Python's temporary directory. A container's /dev/shm (64 MiB
by default) is too small, so the image keeps its handoff under /tmp.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from icetail.kernel.errors import ConfigError
from icetail.kernel.settings import HANDOFF_DIR_ENV

SHM = "/dev/shm"
# More than the handoff holds at most: three waves of 256 MiB of parquet (waves.py), decoded
# about four times larger, when the consumer stalls; a smaller tmpfs would fill up before a disk.
SHM_MIN_FREE_BYTES = 4 * 1024**3
_TEMP_DIR_VARIABLES = ("TMPDIR", "TEMP", "TMP")


def handoff_root(environ: Mapping[str, str] | None = None, shm: str = SHM) -> str:
    """The directory new handoff folders are made in (see the module docstring for the order).

    An ICETAIL_HANDOFF_DIR that is not a writable directory is a ConfigError, before any Spark job.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(HANDOFF_DIR_ENV, "").strip()
    if chosen:
        if not (os.path.isdir(chosen) and os.access(chosen, os.W_OK | os.X_OK)):
            raise ConfigError(
                f"{HANDOFF_DIR_ENV}={chosen!r} is not a directory icetail can write: create it, "
                "or unset the variable (the handoff then goes to /dev/shm or TMPDIR)"
            )
        return chosen
    if any(env.get(name) for name in _TEMP_DIR_VARIABLES):
        return tempfile.gettempdir()
    if _has_room(shm):
        return shm
    return tempfile.gettempdir()


def _has_room(path: str) -> bool:
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and stats.f_bavail * stats.f_frsize >= SHM_MIN_FREE_BYTES
