"""Which engine reads a range (monitor/engine/engine_choice.py), and the in-process engine against Spark."""

from __future__ import annotations

import os
from typing import Any

import pytest

from icetail.kernel.errors import ConfigError, DataFileError
from icetail.kernel.settings import DEFAULT_LOCAL_MAX_BYTES
from icetail.monitor.engine.api import plan_range, read_changes
from icetail.monitor.engine.engine_choice import choose_engine, local_max_bytes, planned_bytes, summary_bytes
from tests.support.small_table import SmallTable


@pytest.mark.parametrize(
    ("engine", "size", "given", "expected"),
    [
        ("local", 10**12, True, "local"),  # asked for: even a big range with a session at hand
        ("spark", 1, False, "spark"),
        ("auto", 1, True, "spark"),  # the caller's session is the caller's choice
        ("auto", 100, False, "local"),
        ("auto", 101, False, "spark"),
        ("auto", None, False, "spark"),  # summaries that cannot tell: big
    ],
)
def test_choose_engine(engine: str, size: int | None, given: bool, expected: str, monkeypatch: Any) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert choose_engine(engine, size, 100, spark_given=given).engine == expected


def test_auto_reads_on_spark_connect_and_never_in_process_at_zero(monkeypatch: Any) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert choose_engine("auto", 0, 0, spark_given=False).engine == "spark"
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")
    choice = choose_engine("auto", 1, 100, spark_given=False)
    assert choice.engine == "spark" and "SPARK_REMOTE" in choice.reason


def test_local_max_bytes_from_the_argument_the_environment_or_the_default() -> None:
    assert local_max_bytes(5, {"ICETAIL_LOCAL_MAX_BYTES": "7"}) == 5
    assert local_max_bytes(None, {"ICETAIL_LOCAL_MAX_BYTES": "7"}) == 7
    assert local_max_bytes(None, {}) == DEFAULT_LOCAL_MAX_BYTES
    with pytest.raises(ConfigError, match="ICETAIL_LOCAL_MAX_BYTES='7MB' is not a number"):
        local_max_bytes(None, {"ICETAIL_LOCAL_MAX_BYTES": "7MB"})
    with pytest.raises(ConfigError, match=">= 0"):
        local_max_bytes(-1, {})
    with pytest.raises(ConfigError, match="engine 'jvm' is not one of: auto, spark, local"):
        choose_engine("jvm", 1, 1, spark_given=False)


def test_summaries_estimate_what_the_plan_reads(small_table: SmallTable) -> None:
    """Two appends and a copy-on-write delete: the summaries name every file the plan reads."""
    table = small_table.load()
    plan = plan_range(table)
    files = sum(t.data_file.file_size_in_bytes for t in plan.tasks)
    assert summary_bytes(table, small_table.snapshot_ids) == files
    assert 0 < planned_bytes(plan.splits) <= files


def test_in_process_rows_and_errors_are_spark_s(small_table: SmallTable, spark: Any) -> None:
    table = small_table.load()
    local, on_spark = read_changes(table, engine="local"), read_changes(table, engine="spark")
    assert local.num_rows == 6 and local.equals(on_spark)
    net = read_changes(table, engine="local", net=True, identifier_columns=["id"])
    assert net.equals(read_changes(table, engine="spark", net=True, identifier_columns=["id"]))
    os.unlink(plan_range(table).tasks[0].data_file.path.removeprefix("file://"))
    messages = []
    for engine in ("local", "spark"):
        with pytest.raises(DataFileError) as raised:
            read_changes(table, engine=engine)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "is missing" in messages[0], messages


@pytest.mark.parametrize(
    ("engine", "max_bytes", "remote", "expected"),
    [
        ("spark", None, "", True),
        ("auto", 0, "", True),  # a bound of 0: every batch on Spark
        ("auto", None, "sc://server", True),  # Spark Connect reads every batch
        ("auto", None, "", False),
        ("auto", 1, "", False),
        ("local", 0, "", False),
    ],
)
def test_serve_starts_spark_at_once_only_when_every_batch_reads_there(
    monkeypatch: pytest.MonkeyPatch, engine: str, max_bytes: int | None, remote: str, expected: bool
) -> None:
    from icetail.monitor.engine.batch_engine import always_on_spark

    monkeypatch.setenv("SPARK_REMOTE", remote)
    monkeypatch.delenv("ICETAIL_LOCAL_MAX_BYTES", raising=False)
    assert always_on_spark(engine, max_bytes) is expected
