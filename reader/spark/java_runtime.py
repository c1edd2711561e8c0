"""Is there a Java for Spark to start? Answered before pyspark tries, in one line.

Spark's launcher (`bin/spark-class`) runs `$JAVA_HOME/bin/java` when JAVA_HOME is set, else
the `java` on PATH; without either pyspark fails with `[JAVA_GATEWAY_EXITED]` after the
launcher's own noise. The check looks where the launcher will look, and when it finds nothing
names an installed Java 17 it can see, so the printed `export` works when pasted.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Mapping

from icetail.kernel.errors import ConfigError

# where Java 17 runtimes usually live (Debian/Ubuntu, RPM distributions, macOS, SDKMAN)
JAVA_17_HOMES = (
    "/usr/lib/jvm/*17*",
    "/usr/lib/jvm/java-17*",
    "/Library/Java/JavaVirtualMachines/*17*/Contents/Home",
    "~/.sdkman/candidates/java/17*",
)


def check_java(environ: Mapping[str, str] | None = None) -> None:
    """ConfigError unless Spark's launcher will find a `java` (JAVA_HOME's, else PATH's)."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME", "")
    if home:
        if not _executable(os.path.join(home, "bin", "java")):
            raise ConfigError(
                f"Spark needs Java 17, but JAVA_HOME={home} has no bin/java; point JAVA_HOME at a Java 17 "
                f"installation{_found_hint()}"
            )
        return
    if shutil.which("java", path=env.get("PATH", os.defpath)) is None:
        raise ConfigError(
            f"Spark needs Java 17, and there is no java on PATH and JAVA_HOME is not set; install a Java 17 "
            f"runtime (e.g. apt-get install openjdk-17-jre-headless) or point JAVA_HOME at one{_found_hint()}"
        )


def java_binary(environ: Mapping[str, str]) -> str | None:
    """The java Spark's launcher runs (JAVA_HOME's, else PATH's), or None."""
    home = environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java", path=environ.get("PATH", os.defpath))
    return java if java and os.path.isfile(java) else None


def _found_hint() -> str:
    found = installed_java_17()
    return f": export JAVA_HOME={found}" if found else " (the folder holding bin/java)"


def installed_java_17() -> str | None:
    """A Java 17 home found in the usual places, or None."""
    for pattern in JAVA_17_HOMES:
        for home in sorted(glob.glob(os.path.expanduser(pattern))):
            if _executable(os.path.join(home, "bin", "java")):
                return home
    return None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
