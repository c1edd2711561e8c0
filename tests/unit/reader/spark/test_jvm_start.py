"""No option icetail adds for speed can stop Spark's JVM from starting (reader/spark/jvm_probe.py).

Real JVMs on real runtimes: a jlink'd one without class data (as the image's was), one whose base
archive is damaged, a class cache folder nobody may write, a HOME nobody may write, JVM options in
the environment that conflict with the class cache. Each starts twice in a row, and the second start
finds what the first left (the java's answer, kept beside the cache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from icetail.reader.spark import jvm_probe
from icetail.reader.spark.class_cache import CACHE_ENV
from icetail.reader.spark.jvm_probe import JvmProbe, probe_java
from tests.support.jvm_starts import jlink_runtime, start_child, started
from tests.support.processes import child_env

pytestmark = pytest.mark.once  # one JVM's behaviour, the same on both lines: the Spark 4 line only

NO_BASE_ARCHIVE = "Specified shared archive not found"


def _jdk_home() -> Path:
    jlink = shutil.which("jlink")
    assert jlink, "jlink (a JDK 17) is needed to build the runtimes these tests start on"
    return Path(os.path.realpath(jlink)).parents[1]


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Java runtimes as the image's build makes them: without class data, and with a damaged base archive."""
    root = tmp_path_factory.mktemp("runtimes")
    bare = jlink_runtime(_jdk_home(), root / "no-class-data", class_data=False)
    damaged = jlink_runtime(_jdk_home(), root / "damaged-class-data", class_data=True)
    for archive in (damaged / "lib" / "server").glob("*.jsa"):
        whole = archive.read_bytes()
        archive.chmod(0o644)
        archive.write_bytes(whole[: len(whole) // 5])
    return {"no-class-data": bare, "damaged-class-data": damaged}


def _java(home: Path) -> str:
    return str(home / "bin" / "java")


def _twice(env: dict[str, str], tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    return [start_child(env, tmp_path) for _ in range(2)]


def _archives(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsa")) if folder.is_dir() else []


def _answers(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_text()) for p in folder.glob("java-probe-*.json")}


@pytest.mark.parametrize("runtime", ["no-class-data", "damaged-class-data"])
def test_a_runtime_without_usable_class_data_starts_twice_without_the_cache(
    runtimes: dict[str, Path], runtime: str, tmp_path: Path
) -> None:
    """Before: `DynamicDumpSharedSpaces is unsupported when base CDS archive is not loaded` on every start."""
    folder = tmp_path / "cache"
    env = child_env(spark_dir=tmp_path / "spark", extra={"JAVA_HOME": str(runtimes[runtime]), CACHE_ENV: str(folder)})
    first = start_child(env, tmp_path)
    kept = _answers(folder)
    (answer,) = (json.loads(text) for _, text in kept.values())
    assert answer["options_start"] and not answer["base_archive"], answer
    assert "icetail:" not in first.stderr, first.stderr[-2000:]  # not a warning: the cache is only skipped
    second = start_child(env, tmp_path)
    assert _answers(folder) == kept  # the second start asked no java: it read the first's answer
    assert _archives(folder) == [] and not list(folder.glob("*.dump.json"))
    assert started(first)["mapped"] == started(second)["mapped"] == []


def test_a_class_cache_folder_nobody_may_write_starts_twice(tmp_path: Path) -> None:
    """An empty folder, immutable (root is not stopped by a folder's mode): nothing written, nothing mapped."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    as_root = os.geteuid() == 0
    subprocess.run(["chattr", "+i", str(folder)], check=True) if as_root else folder.chmod(0o500)
    try:
        env = child_env(spark_dir=tmp_path / "spark", extra={CACHE_ENV: str(folder)})
        for done in _twice(env, tmp_path):
            assert not any(str(folder) in m for m in started(done)["mapped"])  # type: ignore[attr-defined]
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True) if as_root else folder.chmod(0o700)


def test_no_writable_home_starts_twice(tmp_path: Path) -> None:
    """HOME under a file: no ~/.cache to make (root could make any missing folder), no cache, a start."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    env = child_env(spark_dir=tmp_path / "spark", extra={"HOME": str(blocked / "home")})
    env.pop(CACHE_ENV)
    env.pop("XDG_CACHE_HOME", None)
    for done in _twice(env, tmp_path):
        assert "Traceback" not in done.stderr


def test_jvm_options_that_rule_out_class_data_start_twice(tmp_path: Path) -> None:
    """Without compressed class pointers a JVM maps no base archive and so cannot write a cache: the
    java's answer keeps the cache's options out, and the first start's answer serves the second."""
    folder = tmp_path / "cache"
    env = child_env(
        spark_dir=tmp_path / "spark",
        extra={CACHE_ENV: str(folder), "JAVA_TOOL_OPTIONS": "-XX:-UseCompressedClassPointers"},
    )
    first, second = _twice(env, tmp_path)
    assert len(_answers(folder)) == 1 and _archives(folder) == []
    assert started(first)["mapped"] == started(second)["mapped"] == []


def test_a_wrong_kept_answer_costs_one_retried_start_and_is_corrected(
    runtimes: dict[str, Path], tmp_path: Path
) -> None:
    """The safety net: a kept answer that says yes where the java says no (here written by hand) lets
    the class cache's dump option through; the JVM dies at its start, is asked again, and the start is
    retried once without icetail's options, with one warning line naming the cause. The corrected
    answer is kept: the second start starts at once, without a warning."""
    folder = tmp_path / "cache"
    env = child_env(
        spark_dir=tmp_path / "spark", extra={"JAVA_HOME": str(runtimes["no-class-data"]), CACHE_ENV: str(folder)}
    )
    first = start_child(env, tmp_path)
    (kept,) = folder.glob("java-probe-*.json")
    kept.write_text(json.dumps({"options_start": True, "base_archive": True, "refusal": ""}))

    retried = start_child(env, tmp_path)
    warnings = [line for line in retried.stderr.splitlines() if line.startswith("icetail:")]
    assert len(warnings) == 1 and NO_BASE_ARCHIVE in warnings[0], retried.stderr[-3000:]
    assert json.loads(kept.read_text())["base_archive"] is False
    assert not list(folder.glob("*.dump.json"))  # the dump lock of the failed start is gone

    after = start_child(env, tmp_path)
    assert "icetail:" not in after.stderr and "JAVA_GATEWAY_EXITED" not in after.stderr
    assert started(first)["mapped"] == started(after)["mapped"] == []


@pytest.fixture
def fresh_answers() -> Iterator[None]:
    saved = dict(jvm_probe._ANSWERS)
    jvm_probe._ANSWERS.clear()
    yield
    jvm_probe._ANSWERS.clear()
    jvm_probe._ANSWERS.update(saved)


def test_the_probe_names_what_the_java_refuses(runtimes: dict[str, Path], tmp_path: Path, fresh_answers: None) -> None:
    """Real javas asked: a runtime without class data, a heap below the environment's initial one."""
    system_java = shutil.which("java")
    assert system_java
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")}
    assert probe_java(system_java, ["-XX:+UseSerialGC", "-Xmx512m"], env) == JvmProbe(True, True)
    bare = probe_java(_java(runtimes["no-class-data"]), ["-Xmx512m"], env)
    assert bare.options_start and not bare.base_archive and NO_BASE_ARCHIVE in bare.refusal
    damaged = probe_java(_java(runtimes["damaged-class-data"]), ["-Xmx512m"], env)
    assert damaged.options_start and not damaged.base_archive and "truncated" in damaged.refusal
    conflict = probe_java(system_java, ["-Xmx512m"], {**env, "JAVA_TOOL_OPTIONS": "-Xms1g"}, tmp_path)
    assert conflict == JvmProbe(False, True, "Initial heap size set to a larger value than the maximum heap size")
    # kept in the folder: a new process (no answers in memory) reads it instead of asking
    jvm_probe._ANSWERS.clear()
    (kept,) = tmp_path.glob("java-probe-*.json")
    kept.write_text(json.dumps({"options_start": True, "base_archive": False, "refusal": "kept"}))
    assert probe_java(system_java, ["-Xmx512m"], {**env, "JAVA_TOOL_OPTIONS": "-Xms1g"}, tmp_path).refusal == "kept"
    assert (
        probe_java(system_java, ["-Xmx512m"], {**env, "JAVA_TOOL_OPTIONS": "-Xms1g"}, tmp_path, fresh=True) == conflict
    )
