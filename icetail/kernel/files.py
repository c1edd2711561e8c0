"""File modes: files icetail creates are as readable as the user's umask says, like any other tool's.

`tempfile.mkstemp` creates 0600 whatever the umask (right for secrets, wrong for an output file
that is renamed into place for others to read), so a file made that way is given the mode a
plain `open(path, "w")` would have had before it is published.
"""

from __future__ import annotations

import os

_DEFAULT_FILE_MODE = 0o666  # what open() asks for; the umask takes bits away


def current_umask() -> int:
    """The process umask, read without changing it where Linux tells (`/proc/self/status`)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: the only portable read sets it, so it is put back at once
    os.umask(mask)
    return mask


def publishable_mode(fd: int) -> None:
    """Give the file open as `fd` the mode a plain create would have had under the umask."""
    os.fchmod(fd, _DEFAULT_FILE_MODE & ~current_umask())
