"""Branches and tags: which snapshot a named ref points at, and a table seen from a branch.

Everything else in planning follows "the current snapshot" (`metadata.current_snapshot_id`, the
head of `main`). Following another branch is the same walk from another head, so a branch is
followed through a view of the metadata whose current snapshot is that branch's head: lineage,
startup modes, cursor conditions and the planner then resolve on the branch's history unchanged.
The view is for reading only; table metadata is written (tags of --protect-cursor) through the
table as loaded.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType

from icetail.kernel.errors import RefNotFoundError
from icetail.kernel.settings import MAIN_BRANCH


def refs_text(metadata: TableMetadata) -> str:
    """`main (branch), audit (branch), v1 (tag)`: the refs that exist, for one-line errors."""
    refs = sorted(metadata.refs.items(), key=lambda item: (item[0] != MAIN_BRANCH, item[0]))
    listed = ", ".join(f"{name} ({ref.snapshot_ref_type.value})" for name, ref in refs)
    return listed or "none (the table has no snapshot yet)"


def branch_head(metadata: TableMetadata, branch: str, table_name: str) -> int | None:
    """The snapshot at the head of `branch`; None for `main` of a table without snapshots."""
    ref = metadata.refs.get(branch)
    if branch == MAIN_BRANCH and ref is None:
        return metadata.current_snapshot_id
    if ref is None:
        raise RefNotFoundError(
            f"table {table_name} has no branch {branch!r}; refs: {refs_text(metadata)}; check --branch"
        )
    if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise RefNotFoundError(
            f"{branch!r} of table {table_name} is a tag, not a branch (a tag does not move); "
            f"bound a range with --from-tag/--to-tag or start with --start tag:{branch}"
        )
    return ref.snapshot_id


def tag_snapshot(metadata: TableMetadata, tag: str, flag: str, table_name: str) -> int:
    """The snapshot tag `tag` points at; RefNotFoundError naming `flag` and the refs that exist."""
    ref = metadata.refs.get(tag)
    if ref is None:
        raise RefNotFoundError(f"{flag} {tag!r}: table {table_name} has no such tag; refs: {refs_text(metadata)}")
    if ref.snapshot_ref_type != SnapshotRefType.TAG:
        raise RefNotFoundError(
            f"{flag} {tag!r}: {tag!r} of table {table_name} is a branch, not a tag; "
            f"follow it with --branch {tag}, or bound the range with a tag or a snapshot id"
        )
    return ref.snapshot_id


def metadata_on_branch(metadata: TableMetadata, head_snapshot_id: int | None) -> TableMetadata:
    """`metadata` with its current snapshot moved to `head_snapshot_id` (nothing else changes)."""
    if metadata.current_snapshot_id == head_snapshot_id:
        return metadata
    return metadata.model_copy(update={"current_snapshot_id": head_snapshot_id})


def table_on_branch(table: Table, branch: str) -> Table:
    """`table` as seen from `branch`: its current snapshot is the branch's head (read-only use).

    `main` returns `table` itself. RefNotFoundError for a branch the table does not have.
    """
    head = branch_head(table.metadata, branch, ".".join(table.name()))
    metadata = metadata_on_branch(table.metadata, head)
    if metadata is table.metadata:
        return table
    return Table(
        identifier=table.name(),
        metadata=metadata,
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
        config=table.config,
    )


__all__ = ["MAIN_BRANCH", "branch_head", "metadata_on_branch", "refs_text", "table_on_branch", "tag_snapshot"]
