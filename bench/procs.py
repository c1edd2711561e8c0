"""The bench process tree: CPU seconds and peak RSS of the driver, the JVM and the Python workers.

Read from /proc (psutil finds the children when installed); shared by the timing harness (CPU
next to wall time) and the memory case (peak RSS sampled every 20 ms).
"""

from __future__ import annotations

import os
import threading
import time


def tree_cpu_seconds() -> float:
    """User + system CPU of this process and all its live descendants (JVM, Python workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in [os.getpid(), *_children(os.getpid())]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / ticks


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of the Python driver (this process), the JVM and the Python workers."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"driver_python": 0.0, "jvm": 0.0, "python_workers": 0.0}
    me = os.getpid()
    for pid in [me, *_children(me)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            continue
        kind = "driver_python" if pid == me else ("jvm" if _rss_and_kind(pid)[1] == "jvm" else "python_workers")
        out[kind] += cpu
    return out


def worker_counters() -> dict[str, float]:
    """The Python workers' user and system CPU seconds, minor page faults and how many there are
    (a slow round's cause shows in which of them grew: issue 24 s5)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"user": 0.0, "system": 0.0, "minor_faults": 0.0, "workers": 0.0}
    me = os.getpid()
    for pid in _children(me):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if _rss_and_kind(pid)[1] == "jvm":
                continue
            out["user"] += int(fields[11]) / ticks
            out["system"] += int(fields[12]) / ticks
            out["minor_faults"] += int(fields[7])
            out["workers"] += 1
        except (OSError, IndexError, ValueError):
            continue
    return out


def _children(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - the process went away
        return []
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                found.extend(kids)
                todo.extend(kids)
        except OSError:
            continue
    return found


def _rss_and_kind(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return 0, "gone"
    return rss, "jvm" if cmd.endswith("java") else "python"


class RssSampler:
    """Peak RSS of this process (the Python driver), the JVM, and the Python workers, summed per kind."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = {"driver_python": 0, "jvm": 0, "python_workers": 0, "total": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        me = os.getpid()
        now = {"driver_python": _rss_and_kind(me)[0], "jvm": 0, "python_workers": 0}
        for pid in _children(me):
            rss, kind = _rss_and_kind(pid)
            now["jvm" if kind == "jvm" else "python_workers"] += rss if kind != "gone" else 0
        now["total"] = sum(now.values())
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)
