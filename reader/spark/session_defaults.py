"""Settings icetail's own local SparkSession gives Spark only where the user set nothing.

`spark.driver.memory` (the JVM's heap) is the JVM's share of what a big copy-on-write
reconciliation costs: its shuffle passes every change row through the JVM, whose heap then grows
until it is full (a 32M-row UPDATE: JVM 1.21 GB at Spark's default 1 GiB, 0.72 GB at 512 MiB;
bench/RESULTS.md R47, R55), while a read needs little of it. 512 MiB is about Spark's floor: a
local driver refuses a heap under 450 MiB (1.5x its 300 MiB reserve). So icetail starts its JVM
with 512 MiB unless the user sized it anywhere Spark reads it:

- the `conf` given to `spark_session` (the Python API's, a test's);
- PYSPARK_SUBMIT_ARGS: `--driver-memory`, `--conf spark.driver.memory=...`, a `--properties-file`;
- SPARK_DRIVER_MEMORY;
- spark-defaults.conf in SPARK_CONF_DIR, else in SPARK_HOME's (pyspark's own) conf folder.

A setting given any of these ways is left alone (it is Spark's to apply); only an unset one gets
icetail's default. Under spark-submit, or with a SparkContext already running, the JVM is up and
nothing here applies.

The same JVM runs the serial collector (`-XX:+UseSerialGC`) unless the user's JVM options choose one:
G1's concurrent threads and regions cost the local process tree memory and the workers' cores for a
heap of 512 MiB (a copy-on-write UPDATE's peak against its append's: 1.36x with G1, 1.24x serial at
8M rows; 1.55x and 1.44x at 32M; bench/RESULTS.md R57). Java refuses to start with two collectors,
so one chosen in JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS or _JAVA_OPTIONS leaves icetail's out.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping

DRIVER_MEMORY = "spark.driver.memory"
DRIVER_HEAP = "512m"

# icetail's defaults of launch settings, each applied only when the user set it nowhere
TUNED_DEFAULTS: dict[str, str] = {DRIVER_MEMORY: DRIVER_HEAP}

SERIAL_GC = "-XX:+UseSerialGC"
# the variables every `java` reads its options from, before the command line's
JAVA_ENV_OPTIONS = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
_COLLECTOR_FLAG = re.compile(r"-XX:\+Use\w+GC\b")
# flags by which a user's JVM options choose class data sharing themselves (on, off, their own archive)
_CLASS_DATA_FLAG = re.compile(
    r"-Xshare:|-XX:(SharedArchiveFile|ArchiveClassesAtExit)=|-XX:[+-](AutoCreateSharedArchive|UseSharedSpaces)\b"
)

_ENV_KEYS = {"SPARK_DRIVER_MEMORY": DRIVER_MEMORY}
_SUBMIT_FLAGS = {"--driver-memory": DRIVER_MEMORY}


def tuned_defaults(conf: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """icetail's defaults (TUNED_DEFAULTS) of the settings the user did not set."""
    chosen = user_set_keys(conf or {}, os.environ if environ is None else environ)
    return {key: value for key, value in TUNED_DEFAULTS.items() if key not in chosen}


def collector_chosen(environ: Mapping[str, str]) -> bool:
    """Does the environment's JVM options choose a garbage collector?"""
    return any(_COLLECTOR_FLAG.search(environ.get(name, "")) for name in JAVA_ENV_OPTIONS)


def class_data_chosen(environ: Mapping[str, str]) -> bool:
    """Do the environment's JVM options choose class data sharing (then icetail's class cache stays out)?"""
    return any(_CLASS_DATA_FLAG.search(environ.get(name, "")) for name in JAVA_ENV_OPTIONS)


def user_set_keys(conf: Mapping[str, str], environ: Mapping[str, str]) -> set[str]:
    """The Spark settings the user chose: in `conf`, PYSPARK_SUBMIT_ARGS, the environment, spark-defaults.conf."""
    keys = set(conf)
    keys.update(key for name, key in _ENV_KEYS.items() if environ.get(name))
    files = [spark_defaults_file(environ)]
    keys.update(_submit_args_keys(environ.get("PYSPARK_SUBMIT_ARGS", ""), files))
    for path in files:
        if path and os.path.isfile(path):
            keys.update(_properties_keys(path))
    return keys


def spark_defaults_file(environ: Mapping[str, str]) -> str | None:
    """The spark-defaults.conf Spark's launcher reads: SPARK_CONF_DIR's, else SPARK_HOME/conf's."""
    conf_dir = environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = environ.get("SPARK_HOME") or _pyspark_home()
        conf_dir = os.path.join(home, "conf") if home else None
    return os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else None


def _pyspark_home() -> str | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return str(_find_spark_home())
    except Exception:  # noqa: BLE001 - no pyspark, or no home it can find: no defaults file either
        return None


def _submit_args_keys(submit_args: str, files: list[str | None]) -> Iterable[str]:
    """Keys PYSPARK_SUBMIT_ARGS sets (`--conf k=v`, `--driver-memory`); a `--properties-file` joins `files`."""
    try:
        words = shlex.split(submit_args)
    except ValueError:
        words = submit_args.split()
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        if flag in ("--conf", "-c"):
            key = (inline if eq else value).partition("=")[0].strip()
            if key:
                yield key
        elif flag in _SUBMIT_FLAGS:
            yield _SUBMIT_FLAGS[flag]
        elif flag == "--properties-file" and value:
            files.append(value)


def _properties_keys(path: str) -> Iterable[str]:
    """The keys of a Java properties file (spark-defaults.conf): `key value`, `key=value`, `key: value`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":"), _first_space(line)) if i >= 0), default=len(line))
        key = line[:cut].strip()
        if key:
            yield key


def _first_space(line: str) -> int:
    return next((i for i, ch in enumerate(line) if ch.isspace()), -1)
