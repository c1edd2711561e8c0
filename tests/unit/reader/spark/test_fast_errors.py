"""`icetail changes` answers bad input and empty ranges before any JVM starts (issue 25).

Each case runs a real `icetail` child whose JAVA_HOME logs every JVM launch
(tests/support/java_launches.py): the assertion is that none was launched, not a timing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetail.kernel.processes import process_is_running
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.java_launches import CountingJava, counting_java
from tests.support.processes import child_env, icetail_lines, run_icetail

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def source(tmp_path: Path) -> tuple[LocalCatalog, list[int]]:
    """Table fast.t: two appends, the first tagged `v1`."""
    cat = new_catalog(tmp_path / "cat", "fast")
    catalog = cat.catalog()
    catalog.create_namespace("fast")
    table = catalog.create_table("fast.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2], "v": ["a", "b"]}, SCHEMA))
    table.append(pa.table({"id": [3], "v": ["c"]}, SCHEMA))
    table = cat.load("fast.t")
    ids = [s.snapshot_id for s in table.metadata.snapshots]
    table.manage_snapshots().create_tag(ids[0], "v1").commit()
    return cat, ids


@pytest.fixture
def java(tmp_path: Path) -> CountingJava:
    return counting_java(tmp_path)


def _changes(cat: LocalCatalog, java: CountingJava, tmp_path: Path, *args: str) -> tuple[int, list[str], float]:
    env = child_env([cat], tmp_path / "spark", extra={"JAVA_HOME": str(java.home)})
    started = time.monotonic()
    done = run_icetail(["changes", "--catalog", "fast", "--table", "fast.t", *args], env, timeout=120)
    return done.returncode, icetail_lines(done.stderr), time.monotonic() - started


BAD_INPUT: list[tuple[str, Callable[[Path, list[int]], list[str]], str]] = [
    ("unknown from-snapshot", lambda p, ids: ["--from-snapshot", "42", "--output", str(p / "o.parquet")], "42"),
    ("unknown to-tag", lambda p, ids: ["--to-tag", "nope", "--output", str(p / "o.parquet")], "no such tag"),
    ("unknown branch", lambda p, ids: ["--branch", "nope", "--output", str(p / "o.parquet")], "no branch 'nope'"),
    (
        "bad identifier column",
        lambda p, ids: ["--identifier-columns", "idd", "--output", str(p / "o.parquet")],
        "identifier column(s) idd",
    ),
    ("missing output folder", lambda p, ids: ["--output", str(p / "no" / "o.parquet")], "does not exist"),
    ("read-only output folder", lambda p, ids: ["--output", "/proc/o.parquet"], "does not accept new files"),
    (
        "from not an ancestor",
        lambda p, ids: ["--from-snapshot", str(ids[1]), "--to-snapshot", str(ids[0]), "--output", "-"],
        "is not an ancestor",
    ),
]


@pytest.mark.parametrize(("case", "argv", "needle"), BAD_INPUT, ids=[case for case, _, _ in BAD_INPUT])
def test_bad_input_answers_before_any_jvm(
    source: tuple[LocalCatalog, list[int]],
    java: CountingJava,
    tmp_path: Path,
    case: str,
    argv: Callable[[Path, list[int]], list[str]],
    needle: str,
) -> None:
    cat, ids = source
    code, lines, seconds = _changes(cat, java, tmp_path, *argv(tmp_path, ids))
    assert (code, len(lines)) == (2, 1), lines
    assert needle in lines[0], lines
    assert java.count() == 0, f"{case}: a JVM was started ({seconds:.1f}s)"


def test_empty_range_writes_an_empty_file_without_spark(
    source: tuple[LocalCatalog, list[int]], java: CountingJava, tmp_path: Path
) -> None:
    cat, ids = source
    target = tmp_path / "o.parquet"
    code, lines, _ = _changes(cat, java, tmp_path, "--from-snapshot", str(ids[-1]), "--output", str(target))
    assert code == 0, lines
    assert lines == [f"0 change rows from 0 snapshots written to {target}"]
    written = pq.read_table(target)
    assert written.num_rows == 0 and "_change_type" in written.column_names
    assert java.count() == 0


def test_a_range_with_changes_does_start_spark(
    source: tuple[LocalCatalog, list[int]], java: CountingJava, tmp_path: Path
) -> None:
    """The control: the launch log does see a JVM that icetail starts."""
    cat, ids = source
    code, lines, _ = _changes(cat, java, tmp_path, "--from-tag", "v1", "--output", "-")
    assert code == 0, lines
    assert java.count() >= 1


def test_a_failure_while_spark_starts_stops_the_starting_jvm(
    source: tuple[LocalCatalog, list[int]], java: CountingJava, tmp_path: Path
) -> None:
    """Planning fails (a manifest list is gone) while the JVM starts: icetail exits with its one line
    at once and leaves no JVM behind, instead of waiting for the JVM to finish starting."""
    cat, ids = source
    snapshot = cat.load("fast.t").metadata.snapshot_by_id(ids[1])
    assert snapshot is not None
    Path(snapshot.manifest_list.removeprefix("file://")).unlink()
    code, lines, _ = _changes(cat, java, tmp_path, "--output", str(tmp_path / "o.parquet"))
    assert (code, len(lines)) == (2, 1) and "manifest list" in lines[0], lines
    assert [pid for pid in java.pids() if process_is_running(pid)] == []


ABANDON_SCRIPT = """
import subprocess
import sys
import time
from icetail.kernel.processes import child_processes
from icetail.reader.spark.background import BackgroundSession

session = BackgroundSession()
deadline = time.monotonic() + 60
while not child_processes() and time.monotonic() < deadline:  # the launcher is running
    time.sleep(0.02)
launched = sorted(child_processes())
warming_before = session.warming_up  # a JVM still starting: a job now would wait
started = time.monotonic()
session.abandon()
seconds = round(time.monotonic() - started, 3)
try:
    session.result()
    ended = "started"
except Exception as exc:
    ended = type(exc).__name__
print(len(launched), seconds, ended, warming_before, session.warming_up, sorted(child_processes()))
"""


def test_abandon_stops_a_jvm_that_is_still_starting(java: CountingJava, tmp_path: Path) -> None:
    """BackgroundSession.abandon() ends the launch this process started, in well under a JVM start."""
    env = child_env([], tmp_path / "spark", extra={"JAVA_HOME": str(java.home)})
    done = subprocess.run(
        [sys.executable, "-c", ABANDON_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    launched, seconds, ended, warming_before, warming_after, left = done.stdout.split(maxsplit=5)
    assert int(launched) >= 1 and ended != "started" and left.strip() == "[]", done.stdout
    assert (warming_before, warming_after) == ("True", "False"), done.stdout  # settled however the start ended
    assert float(seconds) < 2.0, done.stdout
    assert [pid for pid in java.pids() if process_is_running(pid)] == []


KEEP_SCRIPT = """
from icetail.reader.spark.background import BackgroundSession
from icetail.reader.spark.session import spark_session

spark = spark_session()  # a session that runs before: its JVM is a child of this process too
session = BackgroundSession()
session.abandon()  # at once, while the new session may still be finding the running one
print(spark.sparkContext.parallelize(range(3), 3).count())
"""


def test_abandon_never_stops_a_jvm_that_ran_before(tmp_path: Path) -> None:
    env = child_env([], tmp_path / "spark")
    done = subprocess.run(
        [sys.executable, "-c", KEEP_SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "3"), done.stderr
