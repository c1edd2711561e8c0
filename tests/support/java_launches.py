"""A JAVA_HOME whose `bin/java` logs every launch, then runs the real Java.

Spark's launcher runs `$JAVA_HOME/bin/java` when JAVA_HOME is set, so a child given this home
leaves one line per JVM in `launches`: a test can tell that no JVM was started without timing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CountingJava:
    home: Path
    launches: Path

    def count(self) -> int:
        return len(self.pids())

    def pids(self) -> list[int]:
        """The process id of every JVM launched so far (`exec` keeps the script's id)."""
        lines = self.launches.read_text().splitlines() if self.launches.exists() else []
        return [int(line.split(" ", 1)[0]) for line in lines]


def real_java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        raise RuntimeError("no java on PATH or under JAVA_HOME: Spark cannot run here")
    return os.path.realpath(found)


def counting_java(root: Path) -> CountingJava:
    home = root / "counting-java"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    launches = root / "java-launches.log"
    script = home / "bin" / "java"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> "{launches}"\nexec "{real_java()}" "$@"\n')
    script.chmod(0o755)
    return CountingJava(home, launches)


def path_without_java(root: Path, path: str) -> str:
    """`path` with no `java` on it: each folder holding one is replaced by a folder of links to its
    other programs, so everything else a child runs is still found."""
    folders = []
    for index, folder in enumerate(p for p in path.split(os.pathsep) if p):
        if not os.path.exists(os.path.join(folder, "java")):
            folders.append(folder)
            continue
        shadow = root / f"path-without-java-{index}"
        shadow.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(folder):
            if entry.name != "java" and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry.path)
        folders.append(str(shadow))
    return os.pathsep.join(folders)
