"""Whether a process of this host still runs: for leases and scratch files named after their owner."""

from __future__ import annotations

import os
import re
import socket


def host_name() -> str:
    return socket.gethostname()


def host_tag() -> str:
    """This host's name with anything but letters and digits as `_`, for use inside file names."""
    return re.sub(r"[^A-Za-z0-9]", "_", host_name())


def process_is_running(pid: int) -> bool:
    """True unless no process `pid` exists on this host (a pid we may not signal still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
