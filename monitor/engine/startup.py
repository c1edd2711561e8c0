"""Where a new consumer starts (Kafka's startup modes) and what to do when its cursor is gone."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata

from icetail.kernel.errors import NotAncestorError, TerminalError
from icetail.kernel.settings import MAIN_BRANCH
from icetail.monitor.engine.hints import reset_command
from icetail.monitor.engine.start_mode import StartMode
from icetail.monitor.planning.lineage import (
    CursorCondition,
    cursor_condition,
    history_expired_before,
    is_ancestor,
    snapshot_as_of,
    snapshot_or_raise,
)
from icetail.monitor.planning.refs import tag_snapshot
from icetail.state.checkpoint import Cursor

DIFF = "diff"


def initial_cursor(metadata: TableMetadata, mode: StartMode, table_name: str = "the table") -> Cursor:
    """The cursor (last snapshot considered delivered) a new consumer starts from.

    `metadata`'s current snapshot is the head of the followed branch (refs.metadata_on_branch),
    so every mode resolves on that branch's history; a tag must be on it.
    """
    if mode.kind in ("earliest", "full"):
        return Cursor.before_first_snapshot()
    if mode.kind == "latest":
        current = metadata.current_snapshot()
        return Cursor(current.snapshot_id, current.timestamp_ms) if current else Cursor.before_first_snapshot()
    if mode.kind == "snapshot":
        assert mode.snapshot_id is not None
        start = snapshot_or_raise(metadata, mode.snapshot_id, "--start")
        return Cursor(start.snapshot_id, start.timestamp_ms)
    if mode.kind == "tag":
        assert mode.tag is not None
        tagged = snapshot_or_raise(metadata, tag_snapshot(metadata, mode.tag, "tag", table_name), "tag")
        head = metadata.current_snapshot_id
        if head is None or not is_ancestor(metadata, tagged.snapshot_id, head):
            raise NotAncestorError(
                f"tag {mode.tag!r} (snapshot {tagged.snapshot_id}) of table {table_name} is not on the history of the "
                f"followed branch (head {head}); start from a tag on that branch's history, or follow another --branch"
            )
        return Cursor(tagged.snapshot_id, tagged.timestamp_ms)
    assert mode.timestamp_ms is not None
    found = snapshot_as_of(metadata, mode.timestamp_ms)
    return Cursor(found.snapshot_id, found.timestamp_ms) if found else Cursor.before_first_snapshot()


class CursorLostError(TerminalError, stage="plan"):
    """The committed cursor cannot be continued snapshot by snapshot (see CursorCondition)."""

    condition: CursorCondition | None = None


class CursorExpiredError(CursorLostError):
    """The cursor snapshot itself expired: the changes since it are gone for good."""

    condition = CursorCondition.CURSOR_EXPIRED


class CursorChainExpiredError(CursorLostError):
    """The cursor snapshot is kept, but expiry removed snapshots between it and the current one."""

    condition = CursorCondition.CHAIN_EXPIRED


class CursorNotDescendantError(CursorLostError):
    """The current snapshot does not descend from the cursor: a rollback or a branch reset."""

    condition = CursorCondition.NOT_DESCENDANT


ERROR_OF = {
    CursorCondition.CURSOR_EXPIRED: CursorExpiredError,
    CursorCondition.CHAIN_EXPIRED: CursorChainExpiredError,
    CursorCondition.NOT_DESCENDANT: CursorNotDescendantError,
}


@dataclass(frozen=True)
class CursorProblem:
    """A lost cursor: which condition, what happened, and what fixes it."""

    condition: CursorCondition
    cursor_snapshot_id: int | None  # None: before the first snapshot, whose history expired
    current_snapshot_id: int | None  # the head of the followed branch
    branch: str = MAIN_BRANCH
    oldest_kept_snapshot_id: int | None = None  # the oldest snapshot of the chain, when history expired

    @property
    def message(self) -> str:
        cursor, current = self.cursor_snapshot_id, self.current_snapshot_id
        if cursor is None:
            return (
                f"the cursor is before the first snapshot, but the history before snapshot "
                f"{self.oldest_kept_snapshot_id} has expired, so it cannot be followed from there"
            )
        if self.condition == CursorCondition.CURSOR_EXPIRED:
            return f"cursor snapshot {cursor} has expired (no longer in the table metadata)"
        if self.condition == CursorCondition.CHAIN_EXPIRED:
            return (
                f"cursor snapshot {cursor} is kept, but snapshots between it and current snapshot {current} "
                "have expired (history broken by expiry, not a rollback)"
            )
        if self.branch != MAIN_BRANCH:
            return (
                f"snapshot {current}, the head of branch {self.branch!r}, does not descend from cursor snapshot "
                f"{cursor} (the branch was reset or replaced)"
            )
        return f"current snapshot {current} does not descend from cursor snapshot {cursor} (rollback or branch reset)"

    def fix(self, consumer: str, state_url: str) -> str:
        """What to run instead; every command in it works when pasted (monitor/engine/hints.py)."""
        reset = reset_command(state_url, consumer, "--to", "...")
        if self.cursor_snapshot_id is None:
            to_kept = reset_command(state_url, consumer, "--to", f"snapshot:{self.oldest_kept_snapshot_id}")
            return (
                "rerun with --on-missing-cursor full (the current rows as INSERTs, then the changes) or latest, "
                f"or start after the oldest kept snapshot with {to_kept}"
            )
        if self.condition == CursorCondition.CURSOR_EXPIRED:
            return (
                f"the changes since it cannot be read: rerun with --on-missing-cursor earliest|latest|full or move it "
                f"with {reset}; run with --protect-cursor so that expiry keeps the cursor snapshot next time"
            )
        if self.condition == CursorCondition.CHAIN_EXPIRED:
            return (
                "rerun with --on-missing-cursor diff to deliver the net change since the cursor as one batch "
                "(the default with --protect-cursor)"
            )
        return f"rerun with --on-missing-cursor diff to deliver the rollback as changes, or move it with {reset}"

    def error(self, consumer: str, state_url: str) -> CursorLostError:
        return ERROR_OF[self.condition](f"consumer {consumer!r}: {self.message}; {self.fix(consumer, state_url)}")


def cursor_problem(metadata: TableMetadata, cursor: Cursor, branch: str = MAIN_BRANCH) -> CursorProblem | None:
    """Why the committed cursor cannot be continued from, or None if it can.

    `metadata`'s current snapshot is the head of `branch` (refs.metadata_on_branch).
    """
    condition = cursor_condition(metadata, cursor.snapshot_id)
    if condition is None:
        return None
    current = metadata.current_snapshot_id
    oldest = history_expired_before(metadata, current) if cursor.snapshot_id is None and current is not None else None
    return CursorProblem(
        condition, cursor.snapshot_id, current, branch, oldest.snapshot_id if oldest is not None else None
    )


def recovery_for(problem: CursorProblem, policy: str, protect_cursor: bool) -> str:
    """What to do about a lost cursor: `fail` or a policy of MISSING_CURSOR_POLICIES.

    A direct diff needs the cursor snapshot's files, so it cannot answer an expired cursor; a
    protected consumer repairs a chain broken by expiry by a diff unless told otherwise. From
    before the first snapshot, a diff is the full read (the current rows as INSERTs), and
    `earliest` is where the cursor already is: it cannot answer a history that expired there.
    """
    if problem.cursor_snapshot_id is None:
        return {DIFF: "full", "earliest": "fail"}.get(policy, policy)
    if policy == DIFF:
        return "fail" if problem.condition == CursorCondition.CURSOR_EXPIRED else DIFF
    if policy == "fail" and protect_cursor and problem.condition == CursorCondition.CHAIN_EXPIRED:
        return DIFF
    return policy
