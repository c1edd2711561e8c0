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
    error = problem.error("c1", "postgresql://u@h/db?schema=s&password=pw")
    assert isinstance(error, CursorExpiredError) and isinstance(error, TerminalError) and error.exit_code == 2
    assert f"cursor snapshot {first} has expired" in str(error)
    assert "earliest|latest|full" in str(error) and "--protect-cursor" in str(error) and "diff" not in str(error)
    # the reset it names works when pasted: the store is named (quoted for a shell, its password hidden)
    assert "`icetail reset --state 'postgresql://u@h/db?schema=s&password=***' --consumer c1 --to ...`" in str(error)
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
    error = problem.error("c1", "postgresql://u@h/db?schema=s&password=pw")
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
    error = problem.error("c1", "postgresql://u@h/db?schema=s&password=pw")
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
    from icetail.kernel.settings import parse_missing_cursor_policy

    assert parse_missing_cursor_policy(policy) == policy


def test_before_the_first_snapshot_with_its_history_expired(small_table: SmallTable) -> None:
    """pyiceberg's expiry clears the parent of the oldest kept snapshot, whose summary still says it
    holds more rows than it added: following from before the first snapshot would miss those rows."""
    first, second = small_table.snapshot_ids[:2]
    small_table.load().maintenance.expire_snapshots().by_id(first).commit()
    metadata = small_table.load().metadata
    assert metadata.snapshot_by_id(second).parent_snapshot_id is None  # type: ignore[union-attr]
    assert cursor_condition(metadata, None) == CursorCondition.CHAIN_EXPIRED
    problem = cursor_problem(metadata, Cursor.before_first_snapshot())
    assert problem is not None and problem.oldest_kept_snapshot_id == second
    text = str(problem.error("c1", "sqlite:////s.db"))
    assert f"history before snapshot {second} has expired" in text and "--on-missing-cursor full" in text
    assert f"--consumer c1 --to snapshot:{second}`" in text
    assert recovery_for(problem, "diff", protect_cursor=False) == "full"  # a diff from nothing is the full read
    assert recovery_for(problem, "earliest", protect_cursor=False) == "fail"  # it is where the cursor already is
    assert recovery_for(problem, "latest", protect_cursor=False) == "latest"
