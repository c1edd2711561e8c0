"""A small filesystem under a trial's sink folder or checkpoint store (tmpfs, mounted as root), filled
to the last byte by the `disk-full-*` faults and emptied again before the next run."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

SIZE = "64m"
FILLER = ".chaos-filler"


def can_mount() -> str:
    """'' when small filesystems can be mounted here, else why not (the disk-full faults are then skipped)."""
    if os.geteuid() != 0:
        return "not root (a small tmpfs needs mount)"
    probe = Path(f"/tmp/icetail-chaos-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True)
        if done.returncode != 0:
            return f"mount refused: {done.stderr.decode(errors='replace').strip()[:120]}"
        subprocess.run(["umount", str(probe)], check=False)
        return ""
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


class SmallDisk:
    """A tmpfs of SIZE at `path` (created empty), until `unmount()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(path)], check=True)
        self.full = False

    def fill(self) -> str:
        """Write a filler file until the filesystem refuses more (ENOSPC); a note of the free bytes left."""
        fd = os.open(self.path / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for block in (1 << 20, 4096, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * block):
                        pass
        finally:
            os.close(fd)
        self.full = True
        st = os.statvfs(self.path)
        return f"filled, {st.f_bavail * st.f_frsize} bytes free"

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / FILLER).unlink()
        self.full = False

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
