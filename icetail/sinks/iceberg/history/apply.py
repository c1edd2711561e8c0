"""A group's versions (`history_versions.version_changes`) as ONE overwrite snapshot of an Iceberg
history table: the open versions the group closes are closed in place, the new versions appended.

Closing a version sets its `_valid_to_snapshot_id` and `_valid_to`, so the data files that hold
the open versions of the group's keys are rewritten, as the mirror rewrites the files that hold
its keys (`iceberg/mirror/apply`: the same `key_predicate` pruning, each file read with its
deletes applied, replaced only when a row changed, the same overwrite step). The filter is
narrowed to files with an open version (`_valid_to_snapshot_id IS NULL`): a file of closed
versions only (null count 0) is pruned by its column metrics and never read.

What happens to one file's rows is `CloseOpenVersions`, a function of those rows alone (rows in,
rows out), separate from the loop over the files: the loop may run elsewhere (a Spark task per
file) with the same function. For each row whose key the group closes and that is open: when the
group's first snapshot of the key made it already (the source held the key twice in one snapshot,
split over groups) it is replaced, left out; otherwise it is closed at that snapshot. Either is a
duplicate when the group's first change of the key inserts (`CLOSE_FRESH`: the target should have
held no open version), as in the PostgreSQL history (postgres/apply_history.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysFalse, And, BooleanExpression, IsNull
from pyiceberg.table import Table

from icetail.sinks.iceberg.mirror.apply import GroupRewrite, group_rewrite, key_predicate
from icetail.sinks.iceberg.mirror.files import AffectedKeys, FileChange, RewriteFiles, joinable, rewrite_in_driver
from icetail.sinks.iceberg.schema import conform
from icetail.sinks.keyed.history_versions import (
    CLOSE_FRESH,
    VALID_FROM,
    VALID_FROM_SNAPSHOT_ID,
    VALID_TO,
    VALID_TO_SNAPSHOT_ID,
    VERSION,
    VersionChanges,
)

_ROW, _CLOSE = "__icetail_row", "__icetail_close"
FRESH_CLOSE = "__icetail_fresh"


@dataclass(frozen=True)
class FileVersions:
    """One file's rows after the group: the replaced versions left out, the closed ones closed."""

    rows: pa.Table
    closed: int  # open versions closed (their _valid_to* set)
    replaced: int  # open versions left out (made again by the group's first snapshot of the key)
    duplicates: int  # of those, versions of keys the group inserts fresh

    @property
    def changed(self) -> bool:
        """Whether the file must be replaced by `rows`."""
        return bool(self.closed or self.replaced)


@dataclass(frozen=True)
class CloseOpenVersions:
    """The per-file change of a history group, rows in -> rows out; plain data, so it pickles to a task.

    `closes` has one row per key the group touches: the key columns, `_valid_from_snapshot_id` and
    `_valid_from` of the group's first snapshot of the key (where its open version ends) and
    FRESH_CLOSE (bool: the group's first change of the key inserts)."""

    closes: pa.Table
    key: tuple[str, ...]

    def __call__(self, rows: pa.Table) -> FileVersions:
        close = _close_index(rows, self.closes, self.key)
        open_ = rows.column(VALID_TO_SNAPSHOT_ID).is_null().to_numpy(zero_copy_only=False)
        hit = (close >= 0) & open_
        if not hit.any():
            return FileVersions(rows, 0, 0, 0)
        at = np.where(hit, close, 0)
        end_id = self.closes.column(VALID_FROM_SNAPSHOT_ID).take(pa.array(at))
        end_time = self.closes.column(VALID_FROM).take(pa.array(at))
        fresh = self.closes.column(FRESH_CLOSE).to_numpy(zero_copy_only=False)[at] & hit
        same = pc.equal(rows.column(VALID_FROM_SNAPSHOT_ID), end_id).to_numpy(zero_copy_only=False)
        replaced = hit & same
        closing = hit & ~same
        mask = pa.array(closing)
        to_id, to_time = rows.column(VALID_TO_SNAPSHOT_ID), rows.column(VALID_TO)
        out = rows.set_column(
            rows.schema.get_field_index(VALID_TO_SNAPSHOT_ID),
            rows.schema.field(VALID_TO_SNAPSHOT_ID),
            pc.if_else(mask, end_id.cast(to_id.type), to_id),
        )
        out = out.set_column(
            out.schema.get_field_index(VALID_TO),
            out.schema.field(VALID_TO),
            pc.if_else(mask, end_time.cast(to_time.type), to_time),
        )
        if replaced.any():
            out = out.filter(pa.array(~replaced))
        return FileVersions(out, int(closing.sum()), int(replaced.sum()), int(fresh.sum()))


def closes_of(changes: VersionChanges, key: Sequence[str]) -> pa.Table:
    """The group's close rows as `CloseOpenVersions` takes them (one per key touched)."""
    closing = pc.not_equal(changes.ops, VERSION)
    rows = changes.rows.filter(closing)
    fresh = pc.equal(changes.ops.filter(closing), CLOSE_FRESH)
    return rows.select([*key, VALID_FROM_SNAPSHOT_ID, VALID_FROM]).append_column(FRESH_CLOSE, fresh)


def plan_history(
    table: Table, changes: VersionChanges, key: Sequence[str], rewrite: RewriteFiles = rewrite_in_driver
) -> GroupRewrite:
    """Have `rewrite` (the driver, or Spark tasks: `iceberg/mirror/tasks`) read the files that can hold
    an open version of a touched key and write their rewrites, then write the new versions
    (uncommitted). In the GroupRewrite, `rows_deleted` counts the open versions closed or replaced
    and `rows_upserted` the versions added."""
    schema = table.schema()
    arrow = schema.as_arrow()
    closes = closes_of(changes, key)
    empty = table.current_snapshot() is None or not closes.num_rows
    predicate = AlwaysFalse() if empty else And(key_predicate(closes.select(list(key)), table), _open())
    fresh = closes.column(FRESH_CLOSE).combine_chunks()
    affected = AffectedKeys(tuple(key), closes.select(list(key)), fresh)
    transform = ClosingTransform(CloseOpenVersions(closes, tuple(key)))
    versions = conform(changes.rows.filter(pc.equal(changes.ops, VERSION)), arrow)
    return group_rewrite(table, predicate, affected, transform, rewrite, versions, changes.duplicates)


@dataclass(frozen=True)
class ClosingTransform:
    """`CloseOpenVersions` as the mirror's file runners take a transform (iceberg/mirror/files): the
    same step in the driver and in Spark tasks. `closes` carries what the keys alone do not."""

    close: CloseOpenVersions

    def __call__(self, rows: pa.Table, affected: AffectedKeys, /) -> FileChange:
        result = self.close(rows)
        return FileChange(result.rows, result.closed + result.replaced, result.duplicates)


def _open() -> BooleanExpression:
    """Files with an open version: a file whose `_valid_to_snapshot_id` has no null is pruned."""
    return IsNull(VALID_TO_SNAPSHOT_ID)  # type: ignore[call-arg,arg-type]  # pydantic's signature hides __new__'s


def _close_index(rows: pa.Table, closes: pa.Table, key: Sequence[str]) -> np.ndarray:
    """For each row of `rows`: the index of the close row of its key, -1 when the group does not touch it."""
    n = rows.num_rows
    found = np.full(n, -1, dtype=np.int64)
    if not n or not closes.num_rows:
        return found
    left = {f"k{i}": joinable(rows.column(name)) for i, name in enumerate(key)}
    right = {f"k{i}": joinable(closes.column(name)).cast(left[f"k{i}"].type) for i, name in enumerate(key)}
    left[_ROW] = pa.array(np.arange(n))
    right[_CLOSE] = pa.array(np.arange(closes.num_rows))
    joined = pa.table(left).join(pa.table(right), keys=[f"k{i}" for i in range(len(key))], join_type="inner")
    found[joined.column(_ROW).to_numpy()] = joined.column(_CLOSE).to_numpy()
    return found
