"""Net changes of a range: what each row did from the range's start to its end.

The rule is Iceberg's `create_changelog_view(net_changes => true)` (its
RemoveNetCarryoverIterator), applied to icetail's change rows, which include merge-on-read
deletes: change rows with equal data columns are one group; in the order (`_change_ordinal`,
DELETE before INSERT) a running count adds 1 per INSERT and subtracts 1 per DELETE, and restarts
whenever it returns to zero. |final count| rows survive, each a copy of the row that started
the last run (so they carry that row's `_change_ordinal`, `_commit_snapshot_id` and
`_commit_timestamp`); a final count of zero leaves nothing. Identical rows therefore cancel as
a multiset across the whole range: replaying the net rows onto the rows at the start gives the
rows at the end.

Java runs the count over the raw rows, carry-overs included; a carry-over pair can restart the
count only of a row inserted earlier in the range, so only those pairs are kept (see
`NetChanges.add_snapshot`). Then, with key columns, a key left with exactly one DELETE and one
INSERT becomes one UPDATE_BEFORE/UPDATE_AFTER pair (Java refuses net changes with update
images; this is icetail's extension), both rows carrying the later commit of the two.

With row lineage (v3 tables, rows read with `_row_id`, `NetChanges(row_lineage=True)`), a row
that has a `_row_id` is followed by it instead: its changes across the range, carry-overs
included, in the order (`_change_ordinal`, DELETE before INSERT), reduce to its first and last
change. First a DELETE (the row was there at the start) and last an INSERT (it is there at the
end): one UPDATE_BEFORE/UPDATE_AFTER pair of the first before-image and the last after-image,
or nothing if they are equal; first and last DELETE: one DELETE of the first before-image; first
and last INSERT: one INSERT of the last after-image; first INSERT, last DELETE: nothing. Every
net row of a `_row_id` carries the commit of its last change (for a row without update pairs on a
copy-on-write table that is what Java's count gives it). Last, a net DELETE and a net INSERT
of identical rows that no row id pairs cancel: not every writer keeps row ids (a rewrite or
overwrite by one that does not gives the same rows new ids), so the same content removed and
added is no change, as within a snapshot. Per snapshot, rows are classified as
`reconcile_snapshot(row_lineage=True)` does: one DELETE and one INSERT of a row id are that row's
change (or carry-over); unpaired identical rows cancel as carry-overs (writers that do not keep
lineage, e.g. INSERT OVERWRITE), and such a carry-over of a row already changed in the range
moves it to its new row id (its later changes are followed as the same row); rows without a row
id go through the count above.

Every rule groups by content, by key or by row id, so `run` folds a big batch in partitions by a
stable hash of those, one Spark task each (reader/changes/net_shuffle.py), with the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.model import ChangeType
from icetail.reader.changes.reconcile import HIDDEN_PREFIX, cancelled_rows, lineage_pairs, one_delete_one_insert
from icetail.reader.split.equality import row_codes, rows_matching
from icetail.reader.split.metadata_columns import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
    METADATA_COLUMNS,
    SCHEMA_ID,
)
from icetail.reader.split.row_lineage import LINEAGE_COLUMNS, ROW_ID
from icetail.reader.split.sorted_sets import in_sorted, sorted_unique


def data_columns(schema: pa.Schema) -> list[str]:
    """The columns that make a row's content: everything but change metadata (`_schema_id` too: a row
    inserted under one schema and deleted under the next is the same row) and hidden bookkeeping."""
    skipped = {*METADATA_COLUMNS, SCHEMA_ID, *LINEAGE_COLUMNS}  # lineage is identity, not content
    return [n for n in schema.names if n not in skipped and not n.startswith(HIDDEN_PREFIX)]


def net_key_columns(schema: pa.Schema, identifier_columns: Sequence[str] | None) -> tuple[str, ...]:
    """Columns that say two net change rows are the same table row, for update pairing.

    The identifier columns; none (no pairing: identical rows still cancel) without them. Rows
    with a `_row_id` are keyed by it before (`NetChanges(row_lineage=True)`); these pair the rest.
    """
    if not identifier_columns:
        return ()
    missing = [c for c in identifier_columns if c not in schema.names]
    if missing:
        raise ValueError(f"key column(s) {missing} not in the change rows")
    return tuple(identifier_columns)


COMPACT_MIN_ROWS = 200_000  # held rows below which folding never compacts
ROW_KEY = HIDDEN_PREFIX + "net_row"  # the row id a row is followed by (its first, across lost lineage)


class NetChanges:
    """Folds a range's change rows, snapshot after snapshot in range order, into its net changes.

    It holds each snapshot's rows after carry-over removal plus the carry-over copies of rows
    inserted earlier in the range; never a whole range of raw rows. When the held rows have
    doubled since the last compaction (and exceed `compact_rows`), they are replaced by their
    net rows: the running count of every group restarts from its survivors exactly as it would
    have continued (they are copies of the row that started the run), so what is held stays
    near the net size of the range so far plus what arrived since. `row_lineage`: rows with a
    `_row_id` (the schema must have it) are held apart, by row id, as their first and last change.
    """

    def __init__(self, schema: pa.Schema, *, compact_rows: int = COMPACT_MIN_ROWS, row_lineage: bool = False) -> None:
        self.schema = schema
        self._columns = data_columns(schema)
        self._held: list[pa.Table] = []
        self._inserted: list[pa.Table] = []  # data columns of held INSERTs, to spot their carry-overs
        self._lineage = row_lineage and ROW_ID in schema.names
        self._by_row_id: list[pa.Table] = []  # changes of rows with a row id (carry-overs of held ids too)
        self._held_row_ids = np.empty(0, dtype=np.int64)  # sorted row keys
        self._first_id: dict[int, int] = {}  # row id given by a rewrite that lost lineage -> the row's key
        self.rows_held = 0
        self._compact_at = max(compact_rows, 1)
        self._deletes_since_compaction = False  # INSERTs alone cannot cancel: nothing to gain

    def add_snapshot(self, rows: pa.Table) -> None:
        """The raw DELETE/INSERT rows of one whole snapshot, carry-overs included."""
        if not rows.num_rows:
            return
        rows = rows.cast(self.schema)
        is_delete = _is_delete(rows)
        codes = row_codes(rows.select(self._columns))
        settled = np.zeros(rows.num_rows, dtype=bool)
        if self._lineage:
            before, after = lineage_pairs(rows.column(ROW_ID), is_delete)
            settled[before] = settled[after] = True
            unchanged = codes[before] == codes[after]
            changed = np.r_[before[~unchanged], after[~unchanged]]
            carried = np.r_[before[unchanged], after[unchanged]]
            carried = carried[in_sorted(self._keys(rows.take(pa.array(carried, pa.int64()))), self._held_row_ids)]
            self._hold_by_row_id(rows.take(pa.array(np.sort(np.r_[changed, carried]), pa.int64())))
        rest = np.flatnonzero(~settled)
        cancelled = np.zeros(rows.num_rows, dtype=bool)
        cancelled[rest] = cancelled_rows(codes[rest], is_delete[rest]) if len(rest) else False
        if self._lineage and cancelled.any():
            self._follow_lost_lineage(rows, codes, is_delete, cancelled)
        self._hold_restarting(rows, cancelled)
        self._add_singles(rows.filter(pa.array(~settled & ~cancelled)))
        self._compact_if_due()

    def add_reconciled(self, rows: pa.Table, cancelled: np.ndarray) -> None:
        """A snapshot's rows whose carry-overs (`cancelled`) were found already: the content phase of a
        partitioned fold (reader/changes/net_shuffle.py), which settled lineage pairs and lost lineage before."""
        if not rows.num_rows:
            return
        rows = rows.cast(self.schema)
        self._hold_restarting(rows, cancelled)
        self._add_singles(rows.filter(pa.array(~cancelled)))
        self._compact_if_due()

    def _hold_restarting(self, rows: pa.Table, cancelled: np.ndarray) -> None:
        """Carry-over pairs of rows inserted earlier in the range go into the count: Java counts them."""
        if cancelled.any() and self._inserted:
            pairs = rows.filter(pa.array(cancelled))
            restarting = _matching(pairs.select(self._columns), pa.concat_tables(self._inserted))
            if restarting.any():  # a copy-on-write rewrite of a row inserted in the range: Java counts it
                self._hold(pairs.filter(pa.array(restarting)), track_inserts=False)

    def add_rows(self, rows: pa.Table) -> None:
        """Rows of a snapshot that only deletes or only inserts (nothing to cancel): any chunk size."""
        if rows.num_rows:
            self._add_singles(rows.cast(self.schema))
            self._compact_if_due()

    def _add_singles(self, rows: pa.Table) -> None:
        """Rows no pair settled: by row id when they have one, else into the count."""
        if self._lineage and rows.num_rows:
            has_id = rows.column(ROW_ID).is_valid()
            self._hold_by_row_id(rows.filter(has_id))
            rows = rows.filter(pc.invert(has_id))
        self._hold(rows, track_inserts=True)

    def _follow_lost_lineage(
        self, rows: pa.Table, codes: np.ndarray, is_delete: np.ndarray, cancelled: np.ndarray
    ) -> None:
        """A carry-over by content (a DELETE and an identical INSERT, different row ids: a rewrite
        that did not keep lineage) moves a held row to a new row id: later changes of that id are
        the held row's."""
        index = np.flatnonzero(cancelled)
        deletes, inserts = index[is_delete[index]], index[~is_delete[index]]
        deletes = deletes[np.lexsort((deletes, codes[deletes]))]  # equal counts per code: aligned
        inserts = inserts[np.lexsort((inserts, codes[inserts]))]
        old = rows.column(ROW_ID).take(pa.array(deletes, pa.int64()))
        new = rows.column(ROW_ID).take(pa.array(inserts, pa.int64()))
        both = np.asarray(pc.and_(old.is_valid(), new.is_valid()).to_numpy(zero_copy_only=False))
        old_ids, new_ids = _plain_ids(old)[both], _plain_ids(new)[both]
        keys = self._key_of(old_ids)
        moved = in_sorted(keys, self._held_row_ids) & (old_ids != new_ids)
        self._first_id.update(zip(new_ids[moved].tolist(), keys[moved].tolist(), strict=True))

    def _keys(self, rows: pa.Table) -> np.ndarray:
        return self._key_of(_row_ids(rows))

    def _key_of(self, ids: np.ndarray) -> np.ndarray:
        """The key each row id is followed by: the first row id of its row, across lost lineage."""
        if not self._first_id:
            return ids
        moved = np.fromiter(self._first_id.keys(), dtype=np.int64, count=len(self._first_id))
        first = np.fromiter(self._first_id.values(), dtype=np.int64, count=len(self._first_id))
        order = np.argsort(moved)
        moved, first = moved[order], first[order]
        at = np.minimum(np.searchsorted(moved, ids), len(moved) - 1)
        return np.where(moved[at] == ids, first[at], ids)

    def _hold_by_row_id(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        keys = self._keys(rows)
        self._by_row_id.append(rows.append_column(ROW_KEY, pa.array(keys, pa.int64())))
        self.rows_held += rows.num_rows
        self._held_row_ids = sorted_unique(np.concatenate([self._held_row_ids, np.sort(keys)]))

    def _hold(self, rows: pa.Table, *, track_inserts: bool) -> None:
        if not rows.num_rows:
            return
        self._held.append(rows)
        self.rows_held += rows.num_rows
        self._deletes_since_compaction = self._deletes_since_compaction or bool(_is_delete(rows).any())
        if track_inserts:
            self._track_inserts(rows)

    def _compact_if_due(self) -> None:
        """Only between snapshots (or chunks of a one-kind snapshot): a snapshot's DELETEs count before its INSERTs."""
        if self.rows_held >= self._compact_at and (self._deletes_since_compaction or len(self._by_row_id) > 1):
            self._compact()

    def _track_inserts(self, rows: pa.Table) -> None:
        inserts = rows.filter(pc.equal(rows.column(CHANGE_TYPE), ChangeType.INSERT.value))
        if inserts.num_rows:
            self._inserted.append(inserts.select(self._columns))

    def _compact(self) -> None:
        """Held rows -> their net rows; only the net INSERTs can still be restarted by a carry-over.
        Rows by row id -> each id's first and last change (its last only, if both are INSERTs)."""
        survivors = self.schema.empty_table()
        if self._held:
            rows = pa.concat_tables(self._held)
            survivors = rows.take(pa.array(net_row_indices(rows, self._columns), pa.int64()))
        self._held = [survivors] if survivors.num_rows else []
        self._inserted = []
        self._track_inserts(survivors)
        if self._by_row_id:
            by_id = pa.concat_tables(self._by_row_id)
            first, last = first_and_last_by_row_id(by_id)
            is_delete = _is_delete(by_id)
            needed = is_delete[first] | is_delete[last]  # an INSERT first matters only if a DELETE is last
            by_id = by_id.take(pa.array(sorted_unique(np.r_[first[needed], last]), pa.int64()))
            self._by_row_id = [by_id]
        held_by_id = sum(t.num_rows for t in self._by_row_id)
        self.rows_held = survivors.num_rows + held_by_id
        self._compact_at = max(self._compact_at, 2 * self.rows_held)
        self._deletes_since_compaction = False

    def survivors(self) -> pa.Table:
        """The net rows of the count (rows followed by no row id), unpaired."""
        if not self._held:
            return self.schema.empty_table()
        rows = pa.concat_tables(self._held)
        return rows.take(pa.array(net_row_indices(rows, self._columns), pa.int64()))

    def result(self, key_columns: Sequence[str] = ()) -> pa.Table:
        """The net change rows, ordered by `_change_ordinal`; within one: DELETEs, UPDATE pairs, INSERTs."""
        survivors = self.survivors()
        if not self._by_row_id:
            return paired_in_order(survivors, key_columns) if survivors.num_rows else survivors
        singles, before, after = (
            t.drop_columns([ROW_KEY]) for t in net_by_row_id(pa.concat_tables(self._by_row_id), self._columns)
        )
        return finished(pa.concat_tables([survivors, singles]), before, after, self._columns, key_columns)


def finished(
    singles: pa.Table, before: pa.Table, after: pa.Table, columns: Sequence[str], key_columns: Sequence[str]
) -> pa.Table:
    """The last step with row lineage: `singles` (net DELETE/INSERT rows of the count and of row ids)
    cancelled by content, then paired by key; `before`/`after` are the row ids' UPDATE pairs."""
    # a net DELETE and a net INSERT of identical rows no row id pairs are the same content removed
    # and added (a writer that does not keep lineage rewrote it, or it was deleted and re-inserted):
    # they cancel, as carry-overs do within a snapshot, so the multiset rule holds
    cancelled = cancelled_rows(row_codes(singles.select(list(columns))), _is_delete(singles))
    survivors = singles.filter(pa.array(~cancelled))
    rows = pa.concat_tables([survivors, before, after])
    first_before = survivors.num_rows
    pre_before = np.arange(first_before, first_before + before.num_rows, dtype=np.int64)
    return paired_in_order(rows, key_columns, (pre_before, pre_before + before.num_rows))


def net_by_row_id(rows: pa.Table, columns: Sequence[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(DELETE/INSERT rows, UPDATE_BEFORE images, their UPDATE_AFTER images) of rows keyed by `ROW_KEY`;
    each stamped with the commit of its key's last change."""
    first, last = first_and_last_by_row_id(rows)
    is_delete = _is_delete(rows)
    was_there, is_there = is_delete[first], ~is_delete[last]
    codes = row_codes(rows.select(list(columns)).take(pa.array(np.r_[first, last], pa.int64())))
    changed = codes[: len(first)] != codes[len(first) :]
    deleted = was_there & ~is_there
    updated = was_there & is_there & changed
    inserted = ~was_there & is_there
    stamped = _stamped(rows, first, last)  # first images, last stamps
    singles = pa.concat_tables([stamped.filter(pa.array(deleted)), rows.take(pa.array(last[inserted], pa.int64()))])
    return singles, stamped.filter(pa.array(updated)), rows.take(pa.array(last[updated], pa.int64()))


def first_and_last_by_row_id(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Indices of each row key's first and last change, in (`_change_ordinal`, DELETE first) order."""
    ids = np.asarray(rows.column(ROW_KEY).to_numpy(), dtype=np.int64)
    ordinal = np.asarray(rows.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    order = np.lexsort((~_is_delete(rows), ordinal, ids))
    sorted_ids = ids[order]
    starts = np.r_[0, np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1]
    ends = np.r_[starts[1:], len(ids)]
    return order[starts], order[ends - 1]


def _row_ids(rows: pa.Table) -> np.ndarray:
    return _plain_ids(rows.column(ROW_ID))


def _plain_ids(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row ids as int64 (nulls as 0: callers take only valid ones)."""
    return np.asarray(pc.fill_null(ids, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _stamped(rows: pa.Table, images: np.ndarray, stamps: np.ndarray) -> pa.Table:
    """The rows at `images` with the commit columns of the rows at `stamps`."""
    out = rows.take(pa.array(images, pa.int64()))
    source = rows.take(pa.array(stamps, pa.int64()))
    for name in (CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP):
        position = out.schema.get_field_index(name)
        out = out.set_column(position, out.schema.field(position), source.column(name))
    return out


def fold_range(
    schema: pa.Schema,
    batches: Iterable[tuple[int, pa.RecordBatch]],
    whole_snapshots: set[int],
    *,
    row_lineage: bool = False,
) -> NetChanges:
    """`NetChanges` of (snapshot id, batch) in range order; snapshots in `whole_snapshots` (those that
    can both delete and insert, so can hold carry-overs) are gathered whole, others fold per batch.
    `row_lineage`: the batches carry `_row_id`, and rows that have one are followed by it."""
    net = NetChanges(schema, row_lineage=row_lineage)
    held: list[pa.RecordBatch] = []
    held_snapshot: int | None = None
    for snapshot_id, batch in batches:
        if held_snapshot is not None and snapshot_id != held_snapshot:
            net.add_snapshot(pa.Table.from_batches(held, schema=schema))
            held, held_snapshot = [], None
        if not batch.num_rows:
            continue
        if snapshot_id in whole_snapshots:
            held.append(batch)
            held_snapshot = snapshot_id
        else:
            net.add_rows(pa.Table.from_batches([batch]))
    if held:
        net.add_snapshot(pa.Table.from_batches(held, schema=schema))
    return net


def _matching(rows: pa.Table, others: pa.Table) -> np.ndarray:
    """Mask of `rows` equal to some row of `others`; the first column, hashed, narrows both sides first."""
    first = rows.column(0)
    if pa.types.is_nested(first.type) or pa.types.is_floating(first.type) or not rows.num_rows or not others.num_rows:
        return rows_matching(rows, others)
    values = pc.unique(first.combine_chunks())
    narrowed = others.filter(pc.is_in(others.column(0), value_set=values, skip_nulls=False))
    if not narrowed.num_rows:
        return np.zeros(rows.num_rows, dtype=bool)
    near = np.asarray(
        pc.is_in(first, value_set=pc.unique(narrowed.column(0).combine_chunks()), skip_nulls=False).to_numpy(
            zero_copy_only=False
        )
    )
    mask = np.zeros(rows.num_rows, dtype=bool)
    candidates = np.flatnonzero(near)
    if len(candidates):
        mask[candidates] = rows_matching(rows.take(pa.array(candidates, pa.int64())), narrowed)
    return mask


def is_delete_row(rows: pa.Table) -> np.ndarray:
    """Mask of the DELETE rows."""
    return _is_delete(rows)


def _is_delete(rows: pa.Table) -> np.ndarray:
    return np.asarray(pc.equal(rows.column(CHANGE_TYPE), ChangeType.DELETE.value).to_numpy(zero_copy_only=False))


def net_row_indices(rows: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Indices into `rows` of the net rows (an index repeats for several surviving copies).

    Rows must be DELETE/INSERT. Per group of equal `columns`, in (ordinal, DELETE first) order,
    the running count restarts at each zero; the row after the last zero survives |count| times.
    """
    n = rows.num_rows
    if n == 0:
        return np.empty(0, dtype=np.int64)
    codes = row_codes(rows.select(list(columns)))
    ordinal = np.asarray(rows.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    is_insert = ~_is_delete(rows)
    order = np.lexsort((is_insert, ordinal, codes))  # by code, then ordinal, then DELETE before INSERT
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1]
    ends = np.r_[starts[1:], n]
    running = np.cumsum(np.where(is_insert[order], 1, -1))
    before_group = np.r_[0, running][starts]
    count = running - np.repeat(before_group, ends - starts)
    final = count[ends - 1]
    at_zero = np.where(count == 0, np.arange(n), -1)
    run_start = np.maximum(np.maximum.reduceat(at_zero, starts) + 1, starts)
    alive = final != 0
    return np.asarray(np.repeat(order[run_start[alive]], np.abs(final[alive])), dtype=np.int64)


def paired_in_order(
    rows: pa.Table, key_columns: Sequence[str], pre_paired: tuple[np.ndarray, np.ndarray] | None = None
) -> pa.Table:
    """Net DELETE/INSERT rows with one-DELETE-one-INSERT keys paired, in output order.

    A pair is ordered (and stamped) at the later commit of its two rows: the commit by which
    the key reached its final row. `pre_paired`: (DELETE rows, their INSERT rows) already paired
    (by row id); the key pairs the others.
    """
    is_delete = _is_delete(rows)
    ordinal = np.asarray(rows.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    fixed_before, fixed_after = pre_paired if pre_paired is not None else (np.empty(0, np.int64),) * 2
    free = np.ones(rows.num_rows, dtype=bool)
    free[fixed_before] = free[fixed_after] = False
    rest = np.flatnonzero(free)
    before, after = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if key_columns and len(rest):
        key_codes = row_codes(rows.select(list(key_columns)).take(pa.array(rest, pa.int64())))
        paired_rest = one_delete_one_insert(key_codes, is_delete[rest])
        before_rest = np.nonzero(is_delete[rest] & paired_rest)[0]
        after_rest = np.nonzero(~is_delete[rest] & paired_rest)[0]
        after_of = dict(zip(key_codes[after_rest].tolist(), after_rest.tolist(), strict=True))
        before = rest[before_rest]
        after = rest[np.array([after_of[k] for k in key_codes[before_rest].tolist()], dtype=np.int64)]
    before = np.r_[np.asarray(fixed_before, dtype=np.int64), before].astype(np.int64)
    after = np.r_[np.asarray(fixed_after, dtype=np.int64), after].astype(np.int64)
    paired = np.zeros(rows.num_rows, dtype=bool)
    paired[before] = paired[after] = True
    later = np.where(ordinal[after] >= ordinal[before], after, before)
    singles = np.nonzero(~paired)[0]
    # units: a single row, or a pair (before, after); sorted by (ordinal, DELETE < pair < INSERT, input order)
    first = np.r_[singles, before]
    second = np.r_[np.full(len(singles), -1), after]
    meta = np.r_[singles, later]
    unit_class = np.r_[np.where(is_delete[singles], 0, 2), np.ones(len(before), dtype=np.int64)]
    unit_order = np.lexsort((first, unit_class, ordinal[meta]))
    take = np.stack([first[unit_order], second[unit_order]], axis=1).ravel()
    meta_take = np.stack([meta[unit_order], meta[unit_order]], axis=1).ravel()
    kinds = np.stack(
        [
            np.where(unit_class[unit_order] == 1, ChangeType.UPDATE_BEFORE.value, "").astype(object),
            np.full(len(unit_order), ChangeType.UPDATE_AFTER.value, dtype=object),
        ],
        axis=1,
    ).ravel()
    present = take >= 0
    take, meta_take, kinds = take[present], meta_take[present], kinds[present]
    out = rows.take(pa.array(take, pa.int64()))
    stamps = rows.select([CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP]).take(pa.array(meta_take, pa.int64()))
    for name in (CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP):
        out = out.set_column(out.schema.get_field_index(name), out.schema.field(name), stamps.column(name))
    own_type = out.column(CHANGE_TYPE).to_numpy(zero_copy_only=False)
    types = np.where(kinds == "", own_type, kinds)
    position = out.schema.get_field_index(CHANGE_TYPE)
    return out.set_column(
        position, out.schema.field(position), pa.array(types.tolist(), out.schema.field(position).type)
    )
