"""Every snapshot checks itself: which snapshots of a plan can be checked, and what a mismatch does.

The check itself (counting a snapshot's raw DELETE/INSERT rows as its chunks are read and
comparing them with the rules of monitor/planning/summary_rules.py) is change semantics:
reader/changes/checks.py. Here: which snapshots of a plan or batch a summary can prove
(`rules_of_plan`), and `--verify`'s policy: `off` checks nothing, `warn` (the default) logs a
mismatch and counts it in the metrics, `strict` also refuses to deliver the snapshot
(SnapshotCheckError; docs/delivery.md).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence, Set
from enum import Enum

from pyiceberg.table.metadata import TableMetadata

from icetail.kernel.errors import TerminalError
from icetail.kernel.model import ChangeSplit, ChangeTask
from icetail.kernel.settings import verify_mode_for_read, verify_mode_name
from icetail.monitor.planning.summary_rules import expectations
from icetail.reader.changes.checks import Mismatch, SnapshotCheck, SnapshotRules, SnapshotVerifier

log = logging.getLogger("icetail.verify")


class VerifyMode(str, Enum):
    OFF = "off"
    WARN = "warn"
    STRICT = "strict"


def parse_verify_mode(text: str, flag: str = "--verify") -> VerifyMode:
    return VerifyMode(verify_mode_name(text, flag))


class SnapshotCheckError(TerminalError, stage="read"):
    """A snapshot's changes disagree with its summary under `--verify strict`: nothing of it is delivered."""


def verify_mode_with_filter(verify: str, row_filter: str | None, flag: str = "verify") -> VerifyMode:
    """The verify mode to read with: a filtered read cannot be checked against whole-snapshot summaries."""
    return VerifyMode(verify_mode_for_read(verify, row_filter, flag))


def strict_error(mismatch: Mismatch, setting: str = "--verify") -> SnapshotCheckError:
    """`setting`: how the user set the mode (`--verify`; the data source's `option 'verify'`)."""
    return SnapshotCheckError(
        f"{mismatch.describe()}; refused under {setting} strict, nothing of the snapshot was delivered and the "
        "checkpoint did not move: check the table (a writer that filled its summary wrong, or an icetail bug to "
        f"report), then rerun with {setting} warn to deliver it as read (docs/semantics.md)"
    )


def rules_of_plan(
    metadata: TableMetadata,
    splits: Sequence[ChangeSplit],
    *,
    from_snapshot_exclusive: int | None,
    collapsed: bool,
    fully_read_split_ids: Set[str] | None = None,
) -> dict[int, SnapshotRules]:
    """The rules of each snapshot of a plan that can be checked (empty rules: nothing provable).

    Only snapshots whose every split is read from its first row here (`fully_read_split_ids`,
    default all) can be checked: a batch resumed after a crash does not re-read what it delivered
    before (that part was checked, or delivered under `warn`, by the run that read it). And only
    snapshots read as themselves: the range walks from `from_snapshot_exclusive` to them through
    the plan's snapshots (and skipped replace snapshots), which a start from a full snapshot or a
    repair by a direct diff (`collapsed`) does not.
    """
    tasks: dict[int, list[ChangeTask]] = defaultdict(list)
    whole: dict[int, bool] = defaultdict(lambda: not collapsed)
    for split in splits:
        snapshot_id = split.task.commit.snapshot_id
        tasks[snapshot_id].append(split.task)
        whole[snapshot_id] &= fully_read_split_ids is None or split.split_id in fully_read_split_ids
    reached = {from_snapshot_exclusive, *tasks}
    return {
        s: SnapshotRules(s, expectations(metadata, s, t))
        for s, t in tasks.items()
        if whole[s] and _follows(metadata, s, reached)
    }


def verifier_for(
    mode: VerifyMode,
    metadata: TableMetadata,
    splits: Sequence[ChangeSplit],
    *,
    from_snapshot_exclusive: int | None,
    collapsed: bool,
    fully_read_split_ids: Set[str] | None = None,
) -> SnapshotVerifier | None:
    """The driver's verifier of a plan or batch (None under `off`)."""
    if mode == VerifyMode.OFF:
        return None
    rules = rules_of_plan(
        metadata,
        splits,
        from_snapshot_exclusive=from_snapshot_exclusive,
        collapsed=collapsed,
        fully_read_split_ids=fully_read_split_ids,
    )
    return SnapshotVerifier(rules.values(), splits)


def _follows(metadata: TableMetadata, snapshot_id: int, reached: set[int | None]) -> bool:
    """Whether the snapshot's parent, past any replace snapshots (which a range skips), is in `reached`."""
    snapshot = metadata.snapshot_by_id(snapshot_id)
    while snapshot is not None:
        parent_id = snapshot.parent_snapshot_id
        if parent_id in reached:
            return True
        snapshot = metadata.snapshot_by_id(parent_id) if parent_id is not None else None
        if snapshot is None or snapshot.summary is None or snapshot.summary.operation.value != "replace":
            return False
    return False


def report(
    check: SnapshotCheck, mode: VerifyMode, context: Mapping[str, object] | None = None, setting: str = "--verify"
) -> None:
    """Log each mismatch (warning), and raise the first one under strict."""
    for mismatch in check.mismatches:
        log.warning(
            mismatch.describe(),
            extra={
                **(context or {}),
                "snapshot_id": mismatch.snapshot_id,
                "rule": mismatch.rule,
                "expected": mismatch.expected,
                "found": mismatch.found,
                "verify": mode.value,
            },
        )
    if mode == VerifyMode.STRICT and check.mismatches:
        raise strict_error(check.mismatches[0], setting)
