"""A lost cursor is one of three conditions, each with its own error, message and fix (no Spark)."""

from __future__ import annotations

import pytest

from icetail.kernel.errors import TerminalError
from icetail.monitor.engine.startup import (
    CursorChainExpiredError,
    CursorExpiredError,
    CursorNotDescendantError,
    cursor_problem,
    recovery_for,
)
from icetail.monitor.planning.lineage import CursorCondition, cursor_condition
from icetail.state.checkpoint import Cursor
from tests.support.small_table import SmallTable


def _cursor(small_table: SmallTable, snapshot_id: int) -> Cursor:
    snapshot = small_table.load().metadata.snapshot_by_id(snapshot_id)
    return Cursor(snapshot_id, snapshot.timestamp_ms)


def test_an_ancestor_or_no_cursor_is_fine(small_table: SmallTable) -> None:
    metadata = small_table.load().metadata
    for snapshot_id in (None, *small_table.snapshot_ids):
        assert cursor_condition(metadata, snapshot_id) is None


def test_expired_cursor(small_table: SmallTable) -> None:
    first = small_table.snapshot_ids[0]
    cursor = _cursor(small_table, first)
    small_table.load().maintenance.expire_snapshots().by_id(first).commit()
    problem = cursor_problem(small_table.load().metadata, cursor)
    assert problem is not None and problem.condition == CursorCondition.CURSOR_EXPIRED
    error = problem.error("c1")
    assert isinstance(error, CursorExpiredError) and isinstance(error, TerminalError) and error.exit_code == 2
    assert f"cursor snapshot {first} has expired" in str(error)
    assert "earliest|latest|full" in str(error) and "--protect-cursor" in str(error) and "diff" not in str(error)
    # a direct diff needs the cursor's files: it cannot answer an expired cursor
    assert recovery_for(problem, "diff", protect_cursor=True) == "fail"
    assert recovery_for(problem, "fail", protect_cursor=True) == "fail"
    assert recovery_for(problem, "latest", protect_cursor=False) == "latest"


def test_chain_broken_by_expiry(small_table: SmallTable) -> None:
    first, second, third = small_table.snapshot_ids[:3]
    cursor = _cursor(small_table, first)
    small_table.load().maintenance.expire_snapshots().by_id(second).commit()
    metadata = small_table.load().metadata
    assert metadata.current_snapshot_id == third
    problem = cursor_problem(metadata, cursor)
    assert problem is not None and problem.condition == CursorCondition.CHAIN_EXPIRED
    error = problem.error("c1")
    assert isinstance(error, CursorChainExpiredError)
    assert "not a rollback" in str(error) and "--on-missing-cursor diff" in str(error)
    assert recovery_for(problem, "fail", protect_cursor=True) == "diff"  # a protected consumer repairs itself
    assert recovery_for(problem, "fail", protect_cursor=False) == "fail"
    assert recovery_for(problem, "diff", protect_cursor=False) == "diff"


def test_rollback_to_an_older_snapshot(small_table: SmallTable) -> None:
    first, third = small_table.snapshot_ids[0], small_table.snapshot_ids[2]
    cursor = _cursor(small_table, third)
    small_table.load().manage_snapshots().rollback_to_snapshot(first).commit()
    problem = cursor_problem(small_table.load().metadata, cursor)
    assert problem is not None and problem.condition == CursorCondition.NOT_DESCENDANT
    error = problem.error("c1")
    assert isinstance(error, CursorNotDescendantError)
    assert "rollback" in str(error) and "expired" not in str(error) and "--on-missing-cursor diff" in str(error)
    assert recovery_for(problem, "fail", protect_cursor=True) == "fail"  # protection never repairs a rollback
    assert recovery_for(problem, "diff", protect_cursor=False) == "diff"


def test_rollback_whose_parent_then_expired_is_still_a_rollback(small_table: SmallTable) -> None:
    """The walk stops at an expired parent, but the cursor is newer than where it stopped: not expiry."""
    first, second, third = small_table.snapshot_ids[:3]
    cursor = _cursor(small_table, third)
    small_table.load().manage_snapshots().rollback_to_snapshot(second).commit()
    small_table.load().maintenance.expire_snapshots().by_id(first).commit()
    problem = cursor_problem(small_table.load().metadata, cursor)
    assert problem is not None and problem.condition == CursorCondition.NOT_DESCENDANT


@pytest.mark.parametrize("policy", ["fail", "earliest", "latest", "full", "diff"])
def test_every_policy_is_accepted(policy: str) -> None:
    from icetail.monitor.engine.startup import parse_missing_cursor_policy

    assert parse_missing_cursor_policy(policy) == policy
