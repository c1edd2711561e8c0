"""Does this Java start with icetail's speed options? Asked of that java once; the answer is kept.

icetail gives the local JVM it starts options for speed only: C1, the serial collector, a 512 MiB
heap, the class cache (session.py, session_defaults.py, class_cache.py). None of them may stop a
start, and each can on some runtime: a runtime without a base CDS archive (a jlink'd one, as in a
slim image) or with a damaged one refuses a dynamic dump ("DynamicDumpSharedSpaces is unsupported
when base CDS archive is not loaded"), and the environment's JVM options can conflict with the heap
(`JAVA_TOOL_OPTIONS=-Xms1g` against `-Xmx512m`). So before its JVM starts, a process asks the java
Spark's launcher will run, in the same environment: `java <options> -Xshare:on -version` (~50 ms),
and, only if that fails, the same without `-Xshare:on`, then the bare `-Xshare:on`. The answer is
kept per java binary (path, size, time, and its base archives'), options and environment variables
of JVM options: in the class cache's folder when it is writable, and in the process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from icetail.reader.spark.session_defaults import JAVA_ENV_OPTIONS

PROBE_SECONDS = 30.0
_SHARE_ON = "-Xshare:on"
# what a JVM says around its reason (left out of the refusal, which names the reason alone)
_SAID_EVERY_TIME = (
    "Picked up ",
    "NOTE: Picked up ",
    "Error occurred during initialization of VM",
    "An error has occurred while processing the shared archive file.",
)


@dataclass(frozen=True)
class JvmProbe:
    """What a java said about icetail's speed options."""

    options_start: bool  # the JVM starts with them
    base_archive: bool  # it maps its base CDS archive: a class cache can be written and mapped
    refusal: str = ""  # the JVM's own words where it refused one of the two, on one line


_ANSWERS: dict[str, JvmProbe] = {}


def probe_java(
    java: str, options: Sequence[str], environ: Mapping[str, str], folder: Path | None = None, *, fresh: bool = False
) -> JvmProbe:
    """The answer for `java` with `options` in `environ`: kept in the process and in `folder` (if
    writable); `fresh` asks the java again (after a start failed although the kept answer was yes)."""
    key = _answer_key(java, options, environ)
    if not fresh:
        known = _ANSWERS.get(key) or _read_answer(folder, key)
        if known is not None:
            _ANSWERS[key] = known
            return known
    answer = _ask(java, list(options), environ)
    _ANSWERS[key] = answer
    _write_answer(folder, key, answer)
    return answer


def _ask(java: str, options: list[str], environ: Mapping[str, str]) -> JvmProbe:
    with_class_data = _run(java, [*options, _SHARE_ON], environ)
    if with_class_data is None:
        return JvmProbe(options_start=True, base_archive=True)
    without_class_data = _run(java, options, environ)
    if without_class_data is None:
        return JvmProbe(options_start=True, base_archive=False, refusal=with_class_data)
    if _run(java, [], environ) is not None:  # it refuses to start at all: not icetail's options' doing
        return JvmProbe(options_start=True, base_archive=False)
    base_refused = _run(java, [_SHARE_ON], environ)
    return JvmProbe(options_start=False, base_archive=base_refused is None, refusal=without_class_data)


def _run(java: str, options: list[str], environ: Mapping[str, str]) -> str | None:
    """None when `java <options> -version` starts and exits 0; else what the JVM said why, on one line."""
    try:
        done = subprocess.run(
            [java, *options, "-XX:ErrorFile=/dev/null", "-version"],
            env=dict(environ),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_SECONDS,
            check=False,
            cwd="/",  # a JVM that crashes writes nothing into the caller's folder
        )
    except subprocess.TimeoutExpired:
        return f"`{java} -version` did not answer within {PROBE_SECONDS:.0f} s"
    except OSError as exc:
        return f"{java} could not be run: {exc}"
    if done.returncode == 0:
        return None
    said = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines()]
    lines = [line for line in said if line and not line.startswith(_SAID_EVERY_TIME)]
    return " ".join(lines) if lines else f"exit status {done.returncode}"


def _answer_key(java: str, options: Sequence[str], environ: Mapping[str, str]) -> str:
    """What the answer depends on: the java and its class data (by path, size, time), the options."""
    real = os.path.realpath(java)
    home = Path(real).parent.parent
    parts = [real, *options, *(f"{name}={environ.get(name, '')}" for name in JAVA_ENV_OPTIONS)]
    for path in [Path(real), home / "lib" / "modules", *sorted((home / "lib" / "server").glob("*.jsa"))]:
        with contextlib.suppress(OSError):
            stat = path.stat()
            parts += [str(path), str(stat.st_size), str(stat.st_mtime_ns)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _answer_file(folder: Path, key: str) -> Path:
    return folder / f"java-probe-{key}.json"


def _read_answer(folder: Path | None, key: str) -> JvmProbe | None:
    if folder is None:
        return None
    try:
        return JvmProbe(**json.loads(_answer_file(folder, key).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_answer(folder: Path | None, key: str, answer: JvmProbe) -> None:
    if folder is None or not os.access(folder, os.W_OK):
        return
    path = _answer_file(folder, key)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps(asdict(answer)))
        os.replace(temporary, path)
