"""What a snapshot's summary proves its row-level changes must add up to.

A snapshot summary carries counts (`added-records`, `deleted-records`, `total-records`,
`added-position-deletes`, ...) that Java Iceberg and pyiceberg compute from the files a commit
adds and removes. Only some of them pin down the DELETE and INSERT rows of the snapshot: a rule
here applies only when the summary (and the snapshot's files) prove the equation exact, so a
mismatch is a real disagreement between the table and what icetail read. The rules, and why each
is exact, are in docs/semantics.md ("Every snapshot checks itself").

Counts are the raw ones: DELETE and INSERT rows of the snapshot before carry-over removal and
update pairing (a copy-on-write rewrite re-inserts its unchanged rows, and the summary counts them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.model import ChangeTask, DeleteContent, FileChangeKind

ADDED_RECORDS = "added-records"
DELETED_RECORDS = "deleted-records"
TOTAL_RECORDS = "total-records"
DV_NET = "dv-net"
RULES = (ADDED_RECORDS, DELETED_RECORDS, TOTAL_RECORDS, DV_NET)


@dataclass(frozen=True)
class Expectation:
    """`base + deletes_weight * DELETEs + inserts_weight * INSERTs` must equal `expected`."""

    rule: str
    expected: int
    base: int = 0
    deletes_weight: int = 0
    inserts_weight: int = 0

    def found(self, deletes: int, inserts: int) -> int:
        return self.base + self.deletes_weight * deletes + self.inserts_weight * inserts


def summary_of(snapshot: Snapshot | None) -> dict[str, str] | None:
    """The summary as a plain mapping (`operation` included); None when the snapshot has none."""
    if snapshot is None or snapshot.summary is None:
        return None
    return {"operation": snapshot.summary.operation.value, **snapshot.summary.additional_properties}


class _Counts:
    """Summary counts as integers. Java and pyiceberg omit a count that is zero, so an absent
    key reads as 0 only in a summary that keeps totals (`total-records`): such a writer fills
    every count it knows. Anything unparsable makes the count unknown (None)."""

    def __init__(self, summary: Mapping[str, str]) -> None:
        self._summary = summary
        self.complete = self._int(TOTAL_RECORDS) is not None

    def _int(self, key: str) -> int | None:
        text = self._summary.get(key)
        if text is None:
            return None
        try:
            value = int(text)
        except ValueError:
            return None
        return value if value >= 0 else None

    def get(self, key: str) -> int | None:
        """The count, 0 when absent from a complete summary, None when unknown."""
        value = self._int(key)
        if value is None and key not in self._summary and self.complete:
            return 0
        return value

    def present(self, key: str) -> int | None:
        """The count only when written (delete counts are left out when Java could not trust them)."""
        return self._int(key)


def expectations(metadata: TableMetadata, snapshot_id: int, tasks: Sequence[ChangeTask]) -> tuple[Expectation, ...]:
    """The rules that hold exactly for snapshot `snapshot_id`, given the change tasks icetail planned for it.

    Nothing is expected of a replace snapshot (no row changes), of a snapshot without a summary,
    of a format v1 table, or of one whose added data files do not carry its own sequence number
    (not the files of an ordinary commit: a start from a full snapshot lists older files as added).
    """
    snapshot = metadata.snapshot_by_id(snapshot_id)
    summary = summary_of(snapshot)
    if snapshot is None or summary is None or summary["operation"] == "replace":
        return ()
    if metadata.format_version < 2:
        return ()  # no sequence numbers: an added file of this commit cannot be told from an older one
    sequence = snapshot.sequence_number
    if any(t.kind == FileChangeKind.ADDED and t.data_file.data_sequence_number != sequence for t in tasks):
        return ()
    counts = _Counts(summary)
    if not counts.complete:
        return ()
    parent = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
    parent_summary = summary_of(parent)
    if snapshot.parent_snapshot_id is None:
        parent_counts: _Counts | None = _Counts({TOTAL_RECORDS: "0", "total-delete-files": "0"})
    elif parent_summary is not None:
        parent_counts = _Counts(parent_summary)
    else:
        parent_counts = None  # the parent expired or has no summary: nothing is known of it
    found: list[Expectation] = []
    found += _added_records(counts)
    found += _deleted_records(counts, parent_counts)
    found += _total_records(counts, parent_counts)
    found += _dv_net(counts, parent_counts, tasks)
    return tuple(found)


def _added_records(counts: _Counts) -> list[Expectation]:
    """INSERTs == added-records when the snapshot adds no position deletes or DVs and removes no delete file.

    Then no row that was hidden becomes visible (no delete was removed), and no delete applies to
    a file this snapshot added: older position deletes and DVs have a smaller sequence number than
    it, equality deletes (its own included) need a strictly larger one. Every row of every added
    data file is an INSERT, and Java and pyiceberg sum exactly their `record_count` into added-records.
    """
    added = counts.get(ADDED_RECORDS)
    added_deletes = counts.get("added-delete-files")
    added_equality = counts.get("added-equality-delete-files")
    removed_deletes = counts.get("removed-delete-files")
    if None in (added, added_deletes, added_equality, removed_deletes):
        return []
    assert added is not None
    if added_deletes != added_equality or removed_deletes != 0:
        return []
    return [Expectation(ADDED_RECORDS, added, inserts_weight=1)]


def _deleted_records(counts: _Counts, parent: _Counts | None) -> list[Expectation]:
    """DELETEs == deleted-records when the parent has no delete file and the snapshot adds none.

    Then every row of a removed data file was visible at the parent (a DELETE), and no file that
    stays live changes its visible rows; deleted-records sums the removed files' `record_count`.
    """
    deleted = counts.get(DELETED_RECORDS)
    added_deletes = counts.get("added-delete-files")
    if parent is None or deleted is None or added_deletes != 0 or parent.get("total-delete-files") != 0:
        return []
    return [Expectation(DELETED_RECORDS, deleted, deletes_weight=1)]


def _total_records(counts: _Counts, parent: _Counts | None) -> list[Expectation]:
    """parent's total-records - DELETEs + INSERTs == total-records, when neither has a delete file.

    Without delete files every row of every live data file is visible, so total-records is the
    number of rows a reader sees; its difference between parent and snapshot is the net change.
    """
    if parent is None or counts.get("total-delete-files") != 0 or parent.get("total-delete-files") != 0:
        return []
    total, parent_total = counts.present(TOTAL_RECORDS), parent.present(TOTAL_RECORDS)
    if total is None or parent_total is None:
        return []
    return [Expectation(TOTAL_RECORDS, total, base=parent_total, deletes_weight=-1, inserts_weight=1)]


def _dv_net(counts: _Counts, parent: _Counts | None, tasks: Sequence[ChangeTask]) -> list[Expectation]:
    """DELETEs - INSERTs == added-position-deletes - removed-position-deletes - added-records for DVs.

    A format v3 table holds at most one deletion vector per data file, and a DV's record_count is
    its number of deleted positions. When a commit removes no data file, adds and removes only DVs
    (no equality delete, no v2 position-delete file anywhere in the files it changes) and no
    equality delete is live, a data file's visible rows are its rows minus its DV's positions: the
    rows visible at the snapshot minus those at the parent are the added records minus the net
    change in deleted positions (added DVs' cardinality minus the removed ones'). This stays exact
    when Spark re-writes a file's whole DV on each delete (old positions count on both sides),
    unlike v2 position-delete files, which may repeat a position across live files (no rule there).
    """
    added_dvs = counts.get("added-dvs")
    if parent is None or not added_dvs:
        return []
    structure = (
        counts.get(ADDED_RECORDS),
        counts.get("deleted-data-files"),
        counts.get("added-delete-files"),
        counts.get("removed-delete-files"),
        counts.get("removed-dvs"),
        counts.get("total-equality-deletes"),
        parent.get("total-equality-deletes"),
    )
    if None in structure:
        return []
    added_records, deleted_data, added_deletes, removed_deletes, removed_dvs, equality, parent_equality = structure
    if deleted_data or equality or parent_equality:
        return []
    if added_deletes != added_dvs or removed_deletes != removed_dvs:
        return []
    added_positions = counts.present("added-position-deletes")  # absent: Java did not trust its delete counts
    removed_positions = counts.present("removed-position-deletes") if removed_dvs else 0
    if added_positions is None or removed_positions is None or added_records is None:
        return []
    applied = [d for t in tasks for d in t.deletes_before + t.deletes_after]
    if any(d.content != DeleteContent.DELETION_VECTOR for d in applied):
        return []
    expected = added_positions - removed_positions - added_records
    return [Expectation(DV_NET, expected, deletes_weight=1, inserts_weight=-1)]
