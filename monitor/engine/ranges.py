"""A range's bounds resolved to snapshot ids from table metadata alone, before any manifest is read.

Every bad bound (an unknown snapshot, tag or branch, a from-snapshot off the to-snapshot's
history, expired history) and an empty range show here, in milliseconds: `icetail changes`
resolves first and starts Spark only for a range that has changes to read.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.range_bounds import Instant, RangeBounds
from icetail.monitor.planning.diff import REPLACE, operation_of
from icetail.monitor.planning.lineage import is_ancestor, snapshot_as_of, snapshot_by_id, snapshots_between
from icetail.monitor.planning.planner import ChangePlan, Planner
from icetail.monitor.planning.refs import table_on_branch, tag_snapshot


@dataclass(frozen=True)
class ResolvedRange:
    """(from_snapshot_id_exclusive, to_snapshot_id_inclusive] on `table` seen from its branch."""

    table: Table  # the table as seen from `branch`: its current snapshot is the branch's head
    branch: str
    from_snapshot_id_exclusive: int | None
    to_snapshot_id_inclusive: int | None  # None: nothing to read (no snapshot, or an end before the first)
    snapshot_ids: tuple[int, ...]  # the snapshots in the range, oldest first
    has_changes: bool  # a snapshot in the range may change rows (every one but `replace`)
    schema_id: int | None  # the schema the planner projects onto
    from_tag: str | None = None
    to_tag: str | None = None


def resolve_range(table: Table, bounds: RangeBounds) -> ResolvedRange:
    """The bounds as snapshot ids, checked against the metadata; reads no manifest."""
    _one_bound(
        "start",
        snapshot_id=bounds.from_snapshot_id_exclusive,
        tag=bounds.from_tag,
        timestamp=bounds.from_timestamp_exclusive,
        inclusive_timestamp=bounds.from_timestamp_inclusive,
    )
    _one_bound(
        "end", snapshot_id=bounds.to_snapshot_id_inclusive, tag=bounds.to_tag, timestamp=bounds.to_timestamp_inclusive
    )
    from_instant = _from_instant(bounds)
    if from_instant is not None and bounds.to_timestamp_inclusive is not None:
        if from_instant >= _epoch_ms(bounds.to_timestamp_inclusive):
            raise ConfigError(
                f"the range starts at {_iso(from_instant + 1)}, after its end at "
                f"{_iso(_epoch_ms(bounds.to_timestamp_inclusive))}; give a start before the end"
            )
    followed = table_on_branch(table, bounds.branch)
    metadata = followed.metadata
    name = ".".join(table.name())
    from_id = bounds.from_snapshot_id_exclusive
    to_id = bounds.to_snapshot_id_inclusive
    if bounds.from_tag is not None:
        from_id = tag_snapshot(metadata, bounds.from_tag, "from_tag", name)
    if bounds.to_tag is not None:
        to_id = tag_snapshot(metadata, bounds.to_tag, "to_tag", name)
    if from_instant is not None:
        found = snapshot_as_of(metadata, from_instant)
        from_id = found.snapshot_id if found is not None else None
    if bounds.to_timestamp_inclusive is not None:
        found = snapshot_as_of(metadata, _epoch_ms(bounds.to_timestamp_inclusive))
        if found is None:  # before the first snapshot: nothing to read
            return _resolved(followed, bounds, from_id, None, ())
        to_id = found.snapshot_id
    if to_id is None:
        to_id = metadata.current_snapshot_id
    if to_id is None or to_id == from_id:
        return _resolved(followed, bounds, from_id, to_id, ())
    if from_instant is not None and from_id is not None and is_ancestor(metadata, to_id, from_id):
        return _resolved(followed, bounds, to_id, to_id, ())  # the to-end was committed before the start
    chain = snapshots_between(metadata, from_id, to_id)  # raises for unknown ids, off-history from, expiry
    return _resolved(followed, bounds, from_id, to_id, tuple(s.snapshot_id for s in chain))


def plan_resolved(resolved: ResolvedRange, *, row_filter: str | None = None) -> ChangePlan:
    """The plan of a resolved range (reads the manifests of its snapshots; none for an empty range).

    `row_filter`: data files that hold no row it selects are left out (planning/pruning.py).
    """
    if not resolved.snapshot_ids:
        plan = ChangePlan(
            ".".join(resolved.table.name()),
            resolved.from_snapshot_id_exclusive,
            resolved.to_snapshot_id_inclusive,
            resolved.schema_id,
            (),
            (),
            (),
            branch=resolved.branch,
        )
    else:
        plan = Planner(resolved.table, branch=resolved.branch, row_filter=row_filter).plan(
            resolved.from_snapshot_id_exclusive, resolved.to_snapshot_id_inclusive
        )
    if resolved.from_tag or resolved.to_tag:
        plan = replace(plan, from_tag=resolved.from_tag, to_tag=resolved.to_tag)
    return plan


def _resolved(
    followed: Table, bounds: RangeBounds, from_id: int | None, to_id: int | None, snapshot_ids: tuple[int, ...]
) -> ResolvedRange:
    metadata = followed.metadata
    snapshots = [snapshot_by_id(metadata, i) for i in snapshot_ids]
    to_snapshot = snapshot_by_id(metadata, to_id) if snapshot_ids and to_id is not None else None
    schema_id = to_snapshot.schema_id if to_snapshot is not None and to_snapshot.schema_id is not None else None
    return ResolvedRange(
        table=followed,
        branch=bounds.branch,
        from_snapshot_id_exclusive=from_id,
        to_snapshot_id_inclusive=to_id,
        snapshot_ids=snapshot_ids,
        has_changes=any(s is not None and operation_of(s) != REPLACE for s in snapshots),
        schema_id=schema_id if schema_id is not None else metadata.current_schema_id,
        from_tag=bounds.from_tag,
        to_tag=bounds.to_tag,
    )


def _from_instant(bounds: RangeBounds) -> int | None:
    """The from-bound as the commit time (ms) of the newest snapshot it excludes."""
    if bounds.from_timestamp_exclusive is not None:
        return _epoch_ms(bounds.from_timestamp_exclusive)
    if bounds.from_timestamp_inclusive is not None:
        return _epoch_ms(bounds.from_timestamp_inclusive) - 1  # commit times are whole milliseconds
    return None


_BOUND_KINDS = {"snapshot_id": "a snapshot id", "tag": "a tag", "timestamp": "a timestamp"}


def _one_bound(end: str, **given: object) -> None:
    """At most one bound per end of the range."""
    kinds = [_BOUND_KINDS.get(name, "a timestamp") for name, value in given.items() if value is not None]
    if len(kinds) > 1:
        raise ConfigError(f"the {end} of the range is given twice ({' and '.join(kinds)}); give one of them")


def _epoch_ms(instant: Instant) -> int:
    if isinstance(instant, datetime.datetime):
        aware = instant if instant.tzinfo is not None else instant.replace(tzinfo=datetime.timezone.utc)
        return int(aware.timestamp() * 1000)
    return int(instant)


def _iso(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="milliseconds")
