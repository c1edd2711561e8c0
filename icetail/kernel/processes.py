"""Whether a process of this host still runs: for leases and scratch files named after their owner."""

from __future__ import annotations

import os
import re
import socket
import uuid


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


def pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid), "" where there is none to read.

    A pid means something only inside its namespace: two containers on one host network share the
    host's name, and both run icetail as pid 1."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def process_token() -> str:
    """The token of a lease owner `host:pid:token`: random, and naming this process's PID namespace."""
    namespace = pid_namespace()
    token = uuid.uuid4().hex[:8]
    return f"{token}.{namespace}" if namespace else token


def lease_holder_is_dead(owner: str) -> bool:
    """True when a lease owner `host:pid:token` names a process of this host and PID namespace that no
    longer runs. A process of another namespace (a container beside this one on the host's network,
    or this container's previous run) is never judged: its lease is waited out."""
    parts = owner.split(":")
    if len(parts) != 3 or parts[0] != host_name() or not parts[1].isdigit():
        return False
    namespace = parts[2].partition(".")[2]  # "" in a token written before tokens named it
    if namespace and namespace != pid_namespace():
        return False
    if int(parts[1]) == os.getpid():
        return True  # our own pid in our namespace with another token: a previous process of this pid
    return not process_is_running(int(parts[1]))


def child_processes() -> dict[int, str]:
    """This process's direct children and their command lines (Linux /proc; {} where there is none)."""
    me = str(os.getpid())
    children: dict[int, str] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return children
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                parent = stat.read().rsplit(")", 1)[1].split()[1]  # the name in (...) may hold spaces
            if parent != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                children[int(entry)] = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError):
            continue  # gone meanwhile
    return children
