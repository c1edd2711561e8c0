"""icetail's own session sizes the JVM's heap (512 MiB) only when the user sized it nowhere.

The real-Spark cases start `spark_session()` in child processes (a JVM's heap is fixed at its
launch, and this test process's JVM is up already) and read the heap back from the JVM; the two
children run side by side. The other cases check where a user's setting is found, without Spark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from icetail.reader.spark.session_defaults import DRIVER_HEAP, DRIVER_MEMORY, tuned_defaults, user_set_keys
from tests.support.processes import child_env

MIB = 1024 * 1024
PROBE = """
import json, os
from icetail.reader.spark.session import spark_session
spark = spark_session("icetail-defaults-test")
sc = spark.sparkContext
jvm = sc._jvm
heap = jvm.java.lang.Runtime.getRuntime().maxMemory()
collectors = sorted(str(b.getName()) for b in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans())
probe = jvm.java.lang.System.getProperty("icetail.probe")
print(json.dumps({"conf": sc.getConf().get("spark.driver.memory", None), "heap": heap, "collectors": collectors,
                  "probe": probe}), flush=True)
os._exit(0)  # the JVM ends with its gateway's stdin; nothing here needs a clean stop
"""


def _env(tmp_path: Path, name: str, conf_dir: Path, **extra: str) -> dict[str, str]:
    """A child's environment: no daemon zygote and no worker-interpreter probe (no job runs); the JVM's
    collector is icetail's to choose (no test options in JDK_JAVA_OPTIONS)."""
    env = child_env(
        spark_dir=tmp_path / name,
        extra={"SPARK_CONF_DIR": str(conf_dir), "ICETAIL_DAEMON_ZYGOTE": "0", **extra},
        fast_jvm=False,
    )
    env.pop("PYSPARK_PYTHON", None)
    return env


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _conf_dirs(tmp_path: Path, users_defaults: str) -> tuple[Path, Path]:
    """SPARK_CONF_DIRs: an empty one, and one whose spark-defaults.conf holds `users_defaults`."""
    empty_conf, user_conf = tmp_path / "conf-empty", tmp_path / "conf-user"
    empty_conf.mkdir()
    user_conf.mkdir()
    (user_conf / "spark-defaults.conf").write_text(users_defaults)
    return empty_conf, user_conf


def test_the_heap_default_applies_when_unset_and_yields_to_spark_defaults(tmp_path: Path) -> None:
    empty_conf, user_conf = _conf_dirs(tmp_path, "spark.driver.memory   700m\n")
    unset = _start(_env(tmp_path, "s1", empty_conf))
    chosen = _start(_env(tmp_path, "s2", user_conf))
    ours, theirs = _result(unset), _result(chosen)
    assert ours["conf"] == DRIVER_HEAP
    assert 400 * MIB < int(str(ours["heap"])) <= 512 * MIB
    # the user's spark-defaults.conf is Spark's to apply: icetail passes no heap of its own
    assert theirs["conf"] == "700m"
    assert 600 * MIB < int(str(theirs["heap"])) <= 700 * MIB


@pytest.mark.once  # the JVM's launch, the same on both lines
def test_the_serial_collector_unless_the_user_chose_one(tmp_path: Path) -> None:
    empty_conf, user_conf = _conf_dirs(tmp_path, "spark.driver.extraJavaOptions -Dicetail.probe=kept\n")
    plain = _start(_env(tmp_path, "s1", empty_conf))
    tool_options = _start(_env(tmp_path, "s2", empty_conf, JAVA_TOOL_OPTIONS="-XX:+UseParallelGC"))
    defaults_file = _start(_env(tmp_path, "s3", user_conf))
    ours, theirs, their_file = _result(plain), _result(tool_options), _result(defaults_file)
    assert ours["collectors"] == ["Copy", "MarkSweepCompact"], ours  # the serial collector's two
    assert theirs["collectors"] == ["PS MarkSweep", "PS Scavenge"], theirs  # started: no second collector
    # spark-defaults.conf's JVM options are Spark's to apply: icetail's do not replace them
    assert their_file["probe"] == "kept" and "Copy" not in their_file["collectors"], their_file


def test_a_users_setting_is_found_wherever_spark_reads_it(tmp_path: Path) -> None:
    nothing = {"SPARK_CONF_DIR": str(tmp_path)}
    assert tuned_defaults({}, nothing) == {DRIVER_MEMORY: DRIVER_HEAP}
    assert tuned_defaults({DRIVER_MEMORY: "2g"}, nothing) == {}
    assert tuned_defaults({}, {**nothing, "SPARK_DRIVER_MEMORY": "2g"}) == {}
    for args in (
        "--driver-memory 2g pyspark-shell",
        "--driver-memory=2g pyspark-shell",
        "--conf spark.driver.memory=2g pyspark-shell",
        "--master local[2] --conf=spark.driver.memory=2g pyspark-shell",
    ):
        assert tuned_defaults({}, {**nothing, "PYSPARK_SUBMIT_ARGS": args}) == {}, args
    assert tuned_defaults({}, {**nothing, "PYSPARK_SUBMIT_ARGS": "--conf spark.x=1 pyspark-shell"}) != {}
    props = tmp_path / "mine.properties"
    props.write_text("# sized\nspark.driver.memory=3g\n")
    assert DRIVER_MEMORY in user_set_keys({}, {**nothing, "PYSPARK_SUBMIT_ARGS": f"--properties-file {props} x"})
    (tmp_path / "spark-defaults.conf").write_text("! a comment\nspark.driver.memory: 1g\n")
    assert tuned_defaults({}, nothing) == {}
    (tmp_path / "spark-defaults.conf").write_text("# spark.driver.memory 1g\nspark.executor.memory 1g\n")
    assert tuned_defaults({}, nothing) == {DRIVER_MEMORY: DRIVER_HEAP}
    # without SPARK_CONF_DIR, SPARK_HOME's conf folder
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.memory 1g\n")
    assert tuned_defaults({}, {"SPARK_HOME": str(tmp_path)}) == {}
