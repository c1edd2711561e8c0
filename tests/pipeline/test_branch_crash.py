"""Exactly once on a branch under SIGKILL: `icetail run --branch audit`, killed by a seeded schedule.

The source is the mixed table of test_crash.py with a branch `audit` forked from main's head
and written to (appends, a delete, an overwrite) while main moves on. Every run must leave the
sink a sub-multiset of the branch's whole change stream (`read_changes(branch="audit")`, which
tests/differential/test_branches.py checks against Java's reads of the branch), holding at least
what the state says was committed; the last run exactly that stream, with the cursor at the
branch's head, not main's.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

from icetail.monitor.engine.api import read_changes
from tests.support.catalogs import new_catalog
from tests.support.crash import assert_exactly_once_under_kills, kill_schedule
from tests.support.processes import child_env, icetail_command
from tests.support.sinks import make_sink
from tests.support.tables import build_mixed_table, make_rows

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SEED = int(os.environ.get("ICETAIL_CRASH_SEED", "20261122"))
KILLS = int(os.environ.get("ICETAIL_CRASH_KILLS", "4"))


def test_sigkill_while_following_a_branch_delivers_it_exactly_once(
    tmp_path: Path, spark: Any, record_property: Any
) -> None:
    cat = new_catalog(tmp_path / "source", "branchsrc")
    table = build_mixed_table(cat, "ns.events")
    with table.manage_snapshots() as manage:
        manage.create_branch(table.metadata.current_snapshot_id, "audit")  # type: ignore[arg-type]
    schema = table.schema().as_arrow()
    table = cat.load("ns.events")
    table.append(make_rows(schema, range(20_000, 20_600)), branch="audit")
    table.delete(And(GreaterThanOrEqual("id", 20_100), LessThan("id", 20_140)), branch="audit")
    table.append(make_rows(schema, range(30_000, 30_050)))  # main moves on: not on the branch
    table = cat.load("ns.events")
    table.overwrite(make_rows(schema, range(20_200, 20_230), version=2),
                    overwrite_filter=And(GreaterThanOrEqual("id", 20_200), LessThan("id", 20_230)),
                    branch="audit")  # fmt: skip
    table = cat.load("ns.events")
    table.append(make_rows(schema, range(21_000, 21_300)), branch="audit")
    table = cat.load("ns.events")
    head = table.metadata.refs["audit"].snapshot_id
    assert head != table.metadata.current_snapshot_id
    expected = read_changes(table, branch="audit", spark=spark)
    assert 30_000 not in expected.column("id").to_pylist()

    sink = make_sink("parquet", tmp_path)
    state_url = f"sqlite:///{tmp_path}/state.db"
    consumer = "crash-branch"
    cmd = [
        *icetail_command(),
        "run",
        "--catalog", cat.name,
        "--table", "ns.events",
        "--branch", "audit",
        "--state", state_url,
        "--sink", sink.url,
        "--consumer", consumer,
        "--until-caught-up",
        "--max-snapshots-per-batch", "2",
        "--chunk-rows", "100",
    ]  # fmt: skip
    assert_exactly_once_under_kills(
        cmd, child_env([cat], tmp_path / "spark"), state_url=state_url, consumer=consumer, sink=sink,
        expected_rows=expected, current_snapshot_id=head,
        schedule=kill_schedule(random.Random(f"{SEED}:branch"), KILLS), logs=tmp_path / "logs",
        label=f"seed {SEED}", record=record_property,
    )  # fmt: skip
