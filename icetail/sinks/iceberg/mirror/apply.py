"""A group's net changes as ONE overwrite snapshot of the Iceberg mirror: the data files that hold
an affected key rewritten without its rows, the net upserts appended.

Which files: the affected keys (every key of the group's net changes: a deleted key and an upserted
one both lose their old row) become a filter, `In(key, ...)` (for a composite key, an `And` of one
`In` per column: a superset, exact rows are matched below). pyiceberg's scan planning prunes by it:
partitions (a target bucketed by the key keeps a group's keys in few partitions) and each file's
column bounds. pyiceberg's metrics evaluators give up on an `In` of more than 200 values
(`IN_PREDICATE_LIMIT`: every file "might match"), so the values go in slices of 200 joined by `Or`.
Each file that can hold a key is read (its position deletes applied), and only if it holds one is
it replaced by a file without those rows (none when nothing is left); the others are kept as they
are (`iceberg/mirror/files`: the rows matched by an Arrow semi-join on the key columns). The files
are read and written in the driver, or, when they hold enough bytes and the mirror has a Spark
session, in Spark tasks (`iceberg/mirror/tasks`): the commit is the same either way.

Why not position deletes or deletion vectors: pyiceberg (0.12) writes neither (its own delete
rewrites files, and warns that merge-on-read is not supported), so copy-on-write of the touched
files is the one way a pyiceberg commit can remove rows; docs/sinks.md says what that costs.

Everything lands in one `overwrite` snapshot whose summary names the group's chunks (the
ledger's `chunk_summary`): the commit is the group, whole or not at all.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    In,
    LessThanOrEqual,
    Or,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from icetail.sinks.iceberg.mirror.files import (
    AffectedKeys,
    FileTransform,
    GroupFiles,
    RewriteFiles,
    drop_affected,
    rewrite_in_driver,
)
from icetail.sinks.iceberg.mirror.manifests import carry_live_only
from icetail.sinks.iceberg.schema import conform
from icetail.sinks.keyed.merge import DELETE, FRESH, NetChanges

IN_LIMIT = 200  # pyiceberg's IN_PREDICATE_LIMIT: metrics are not evaluated for a longer IN
RANGE_OVER = 2_000  # distinct values of a key column over which the filter is ranges, not INs
MAX_RANGES = 64  # ranges of such a filter
RANGED = (int, str, datetime.date, datetime.datetime, decimal.Decimal)  # the key types ranges are made of


@dataclass(frozen=True)
class GroupRewrite:
    """What one group's commit changes in the target, prepared (files written) but not committed."""

    predicate: BooleanExpression  # where the affected keys can be: the files' and manifests' pruning filter
    replaced: tuple[tuple[DataFile, tuple[DataFile, ...]], ...]  # a file holding an affected key -> its rewrite
    added: tuple[DataFile, ...]  # the net upserts
    files_read: int  # files the pruning left, read to find the keys' rows
    rows_deleted: int  # rows of the target removed (old rows of affected keys)
    rows_upserted: int
    duplicates: int  # rows of keys the group inserts fresh that the target held already
    spark_tasks: int = 0  # the Spark tasks that rewrote the files read (0: the driver did)

    def stage(self, summary: dict[str, str]) -> Callable[[Transaction], None]:
        """The transaction step: one overwrite snapshot carrying `summary`."""

        def overwrite(transaction: Transaction) -> None:
            with transaction.update_snapshot(snapshot_properties=summary).overwrite() as snapshot:
                carry_live_only(snapshot)  # manifests without a live file are not carried on
                snapshot.delete_by_predicate(self.predicate)  # the manifests that may list a replaced file
                for old, new in self.replaced:
                    snapshot.delete_data_file(old)
                    for data_file in new:
                        snapshot.append_data_file(data_file)
                for data_file in self.added:
                    snapshot.append_data_file(data_file)

        return overwrite


def key_predicate(keys: pa.Table, table: Table) -> BooleanExpression:
    """Where rows of `keys` can be, as a filter pyiceberg prunes by; AlwaysTrue if it cannot bind it."""
    parts = [_column_filter(name, set(keys.column(name).to_pylist())) for name in keys.column_names]
    predicate = _balanced(parts, _and)
    try:
        bind(table.schema(), predicate, case_sensitive=True)
    except Exception:  # noqa: BLE001 - a key type pyiceberg cannot make literals of: no pruning, still exact
        return AlwaysTrue()
    return predicate


def _column_filter(name: str, values: set[object]) -> BooleanExpression:
    """One key column's values as INs of IN_LIMIT values, `Or`-ed in a balanced tree (a chain of
    hundreds of `Or`s overflows the recursion of pyiceberg's visitors: no pruning at all). Over
    RANGE_OVER values, ranges instead (`_ranges`): pyiceberg makes a literal of every IN value (~20
    us each: 2 s for 100,000 keys), a range needs two; ranges prune by bounds and identity
    partitions too, less exactly (a range may span files without a key; the rows are matched
    exactly anyway), but not by bucket partitions."""
    ordered: list[Any] = sorted(values, key=repr)
    if len(ordered) > RANGE_OVER and all(type(v) in RANGED for v in ordered):  # ordered as Iceberg orders them
        ordered.sort()
        return _balanced([_between(name, low, high) for low, high in _ranges(ordered)], _or)
    slices = [ordered[i : i + IN_LIMIT] for i in range(0, len(ordered), IN_LIMIT)]
    return _balanced([_in(name, s) for s in slices], _or)


def _ranges(ordered: list[Any]) -> list[tuple[Any, Any]]:
    """At most MAX_RANGES ranges covering the values: integers split at their largest gaps (the
    tightest cover: a range does not span the files between two clusters of keys; a run of
    consecutive keys is one range), other types in equal slices. Binding and evaluating the filter
    costs per range (pyiceberg binds it once per manifest and file evaluator)."""
    if all(type(v) is int for v in ordered) and -(2**63) <= ordered[0] and ordered[-1] < 2**63:
        gaps = np.diff(np.array(ordered, dtype=np.int64))
        count = min(MAX_RANGES, 1 + int(np.count_nonzero(gaps > 1)))
        cuts = sorted(int(i) + 1 for i in np.argpartition(gaps, -(count - 1))[-(count - 1) :]) if count > 1 else []
        bounds = [0, *cuts, len(ordered)]
    else:
        step = -(-len(ordered) // MAX_RANGES)
        bounds = [*range(0, len(ordered), step), len(ordered)]
    return [(ordered[a], ordered[b - 1]) for a, b in itertools.pairwise(bounds)]


def _balanced(
    parts: list[BooleanExpression], join: Callable[[BooleanExpression, BooleanExpression], BooleanExpression]
) -> BooleanExpression:
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return join(_balanced(parts[:middle], join), _balanced(parts[middle:], join))


def _between(name: str, low: object, high: object) -> BooleanExpression:
    return And(GreaterThanOrEqual(name, low), LessThanOrEqual(name, high))  # type: ignore[call-arg,arg-type]


def _in(name: str, values: list[object]) -> BooleanExpression:
    return In(name, values)  # type: ignore[call-arg,arg-type]  # pydantic's signature hides __new__'s


def _or(left: BooleanExpression, right: BooleanExpression) -> BooleanExpression:
    return Or(left, right)


def _and(left: BooleanExpression, right: BooleanExpression) -> BooleanExpression:
    return And(left, right)


def plan_rewrite(
    table: Table,
    net: NetChanges,
    key: Sequence[str],
    rewrite: RewriteFiles = rewrite_in_driver,
    transform: FileTransform = drop_affected,
) -> GroupRewrite:
    """Plan the files that can hold an affected key, have `rewrite` read and rewrite them (in the
    driver or in Spark tasks: `iceberg/mirror/tasks`), write the upserts; nothing committed."""
    schema = table.schema()
    arrow = schema.as_arrow()
    keys = net.rows.select(list(key))
    fresh = pc.equal(net.ops, FRESH)
    affected = AffectedKeys(tuple(key), keys, fresh.combine_chunks() if isinstance(fresh, pa.ChunkedArray) else fresh)
    # an empty target (a first load) has no file to prune: the filter (~20 us a key) is not built
    empty = table.current_snapshot() is None
    predicate = AlwaysFalse() if empty else key_predicate(keys, table)
    upserts = conform(net.rows.filter(pc.not_equal(net.ops, DELETE)), arrow)
    return group_rewrite(table, predicate, affected, transform, rewrite, upserts, net.duplicates)


def group_rewrite(
    table: Table,
    predicate: BooleanExpression,
    affected: AffectedKeys,
    transform: FileTransform,
    rewrite: RewriteFiles,
    appended: pa.Table,
    duplicates: int,
) -> GroupRewrite:
    """The files `predicate` leaves, rewritten by `rewrite` with `transform`, and `appended` written:
    a group's commit, prepared (the mirror's upserts or the history's new versions)."""
    files = [] if isinstance(predicate, AlwaysFalse) else list(table.scan(row_filter=predicate).plan_files())
    group = GroupFiles(table.metadata, table.io, files, affected, transform)
    outcomes, spark_tasks = rewrite(group) if files else ([], 0)
    written = _dataframe_to_data_files(table.metadata, appended, table.io, uuid.uuid4()) if appended.num_rows else ()
    return GroupRewrite(
        predicate,
        tuple((o.old, o.new) for o in outcomes if o.new is not None),
        tuple(written),
        len(files),
        sum(o.affected for o in outcomes),
        appended.num_rows,
        sum(o.duplicates for o in outcomes) + duplicates,
        spark_tasks,
    )
