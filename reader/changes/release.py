"""When read chunks may leave: the one hold-and-reconcile order of every delivery path.

The Python API, the pipeline and a Spark task of the data source all read a plan's chunks in
plan order and hand them on in the same units:
- a snapshot that can yield both DELETE and INSERT rows (`gathered_snapshots`) is held whole and
  leaves as one unit, to be reconciled (reconcile.py pairs updates, drops carry-over);
- under `--verify strict` a snapshot some summary rule proves is held until its check passed,
  then leaves as read; a failed check raises before any of its rows left (checks.py counts, the
  caller's `on_check` decides);
- every other chunk leaves as soon as it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass

import pyarrow as pa

from icetail.kernel.model import ChangeTask, FileChangeKind
from icetail.reader.changes.checks import SnapshotCheck, SnapshotVerifier
from icetail.reader.changes.reconcile import reconcile_snapshot
from icetail.reader.split.read import Chunk
from icetail.reader.split.row_lineage import without_lineage


def snapshots_needing_reconcile(tasks: Iterable[ChangeTask]) -> set[int]:
    """Snapshots whose tasks can yield both DELETE and INSERT rows."""
    deleting: set[int] = set()
    inserting: set[int] = set()
    for task in tasks:
        sid = task.commit.snapshot_id
        if task.kind in (FileChangeKind.REMOVED, FileChangeKind.MODIFIED):
            deleting.add(sid)
        if task.kind in (FileChangeKind.ADDED, FileChangeKind.MODIFIED):
            inserting.add(sid)
    return deleting & inserting


def gathered_snapshots(
    tasks: Iterable[ChangeTask], *, carry_over_removal: bool, identifiers: Sequence[str], lineage_pairing: bool
) -> set[int]:
    """The snapshots read whole before they leave: those that can hold carry-overs or updates, when
    anything would be done to them (carry-over removal, or pairing by identifier or `_row_id`)."""
    if not (carry_over_removal or identifiers or lineage_pairing):
        return set()
    return snapshots_needing_reconcile(tasks)


@dataclass(frozen=True)
class Release:
    """Chunks that may leave together: one read chunk, or the whole of a held snapshot."""

    snapshot_id: int
    chunks: tuple[Chunk, ...]
    reconcile: bool  # a gathered snapshot, whole: its rows are reconciled as one

    @property
    def batches(self) -> list[pa.RecordBatch]:
        """The rows carried by the chunks (staged chunks carry none), without empty batches."""
        return [c.batch for c in self.chunks if c.batch is not None and c.batch.num_rows]


def releases(
    chunks: Iterable[Chunk],
    snapshot_of: Mapping[str, int],
    gathered: Set[int],
    verifier: SnapshotVerifier | None = None,
    *,
    strict: bool = False,
    on_check: Callable[[SnapshotCheck], None] | None = None,
) -> Iterator[Release]:
    """`chunks` (in plan order, a snapshot's chunks next to each other) in the units they may leave in.

    `snapshot_of` maps a split id to its commit snapshot. Each chunk is counted by `verifier`;
    `on_check` gets a snapshot's check when its last chunk is read and may raise to refuse it
    (under strict, nothing of that snapshot has been released then). `chunks` is closed when
    the releases end, are refused or are abandoned, not when the garbage collector gets to it.
    """
    try:
        held: list[Chunk] = []
        held_snapshot: int | None = None
        for chunk in chunks:
            snapshot_id = snapshot_of[chunk.split_id]
            if held_snapshot is not None and snapshot_id != held_snapshot:
                yield Release(held_snapshot, tuple(held), held_snapshot in gathered)
                held, held_snapshot = [], None
            check = verifier.add(chunk) if verifier is not None else None
            if check is not None and on_check is not None:
                on_check(check)
            gather = snapshot_id in gathered
            if not gather and not (strict and verifier is not None and verifier.proves(snapshot_id)):
                yield Release(snapshot_id, (chunk,), reconcile=False)
                continue
            held.append(chunk)
            held_snapshot = snapshot_id
            if check is not None and not gather:  # checked and passed: it leaves as read
                yield Release(snapshot_id, tuple(held), reconcile=False)
                held, held_snapshot = [], None
        if held_snapshot is not None:
            yield Release(held_snapshot, tuple(held), held_snapshot in gathered)
    finally:  # a refused check or an abandoned read stops the read now (run_splits cancels its Spark jobs)
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def observed(chunks: Iterable[Chunk], on_chunk: Callable[[Chunk], None]) -> Iterator[Chunk]:
    """`chunks`, each shown to `on_chunk` as it is read (before it is held or released)."""
    for chunk in chunks:
        on_chunk(chunk)
        yield chunk


def snapshot_batches(released: Iterable[Release]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of released chunks with their commit snapshot, as a net fold takes them (net.py)."""
    for release in released:
        for batch in release.batches:
            yield release.snapshot_id, batch


@dataclass(frozen=True)
class Pairing:
    """How a gathered snapshot's rows are reconciled, and which columns leave."""

    read_schema: pa.Schema  # the rows as read: with the lineage columns when pairing reads them
    identifiers: tuple[str, ...]
    carry_over_removal: bool
    lineage_pairing: bool  # a v3 table: updates pair by `_row_id` first
    with_row_lineage: bool  # the output keeps `_row_id` and `_last_updated_sequence_number`

    def reconciled(self, batches: Sequence[pa.RecordBatch]) -> pa.Table:
        """The snapshot's change rows after update pairing and carry-over removal."""
        rows = (
            reconcile_snapshot(
                pa.Table.from_batches(batches, schema=self.read_schema),
                self.identifiers or None,
                self.carry_over_removal,
                row_lineage=self.lineage_pairing,
            )
            if batches
            else self.read_schema.empty_table()
        )
        return rows if self.with_row_lineage else without_lineage(rows)
