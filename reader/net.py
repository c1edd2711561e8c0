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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.model import ChangeType
from icetail.reader.equality import row_codes, rows_matching
from icetail.reader.metadata_columns import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
    METADATA_COLUMNS,
    SCHEMA_ID,
)
from icetail.reader.reconcile import HIDDEN_PREFIX, cancelled_rows, one_delete_one_insert


def data_columns(schema: pa.Schema) -> list[str]:
    """The columns that make a row's content: everything but change metadata (`_schema_id` too: a row
    inserted under one schema and deleted under the next is the same row) and hidden bookkeeping."""
    return [n for n in schema.names if n not in METADATA_COLUMNS and n != SCHEMA_ID and not n.startswith(HIDDEN_PREFIX)]


def net_key_columns(schema: pa.Schema, identifier_columns: Sequence[str] | None) -> tuple[str, ...]:
    """Columns that say two net change rows are the same table row, for update pairing.

    The identifier columns; none (no pairing: identical rows still cancel) without them. This is
    the one place to key by v3 row lineage: when the rows carry `_row_id`, return that instead.
    """
    if not identifier_columns:
        return ()
    missing = [c for c in identifier_columns if c not in schema.names]
    if missing:
        raise ValueError(f"key column(s) {missing} not in the change rows")
    return tuple(identifier_columns)


COMPACT_MIN_ROWS = 200_000  # held rows below which folding never compacts


class NetChanges:
    """Folds a range's change rows, snapshot after snapshot in range order, into its net changes.

    It holds each snapshot's rows after carry-over removal plus the carry-over copies of rows
    inserted earlier in the range; never a whole range of raw rows. When the held rows have
    doubled since the last compaction (and exceed `compact_rows`), they are replaced by their
    net rows: the running count of every group restarts from its survivors exactly as it would
    have continued (they are copies of the row that started the run), so what is held stays
    near the net size of the range so far plus what arrived since.
    """

    def __init__(self, schema: pa.Schema, *, compact_rows: int = COMPACT_MIN_ROWS) -> None:
        self.schema = schema
        self._columns = data_columns(schema)
        self._held: list[pa.Table] = []
        self._inserted: list[pa.Table] = []  # data columns of held INSERTs, to spot their carry-overs
        self.rows_held = 0
        self._compact_at = max(compact_rows, 1)
        self._deletes_since_compaction = False  # INSERTs alone cannot cancel: nothing to gain

    def add_snapshot(self, rows: pa.Table) -> None:
        """The raw DELETE/INSERT rows of one whole snapshot, carry-overs included."""
        if not rows.num_rows:
            return
        rows = rows.cast(self.schema)
        is_delete = _is_delete(rows)
        cancelled = cancelled_rows(row_codes(rows.select(self._columns)), is_delete)
        if cancelled.any() and self._inserted:
            pairs = rows.filter(pa.array(cancelled))
            restarting = _matching(pairs.select(self._columns), pa.concat_tables(self._inserted))
            if restarting.any():  # a copy-on-write rewrite of a row inserted in the range: Java counts it
                self._hold(pairs.filter(pa.array(restarting)), track_inserts=False)
        self._hold(rows.filter(pa.array(~cancelled)), track_inserts=True)
        self._compact_if_due()

    def add_rows(self, rows: pa.Table) -> None:
        """Rows of a snapshot that only deletes or only inserts (nothing to cancel): any chunk size."""
        if rows.num_rows:
            self._hold(rows.cast(self.schema), track_inserts=True)
            self._compact_if_due()

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
        if self.rows_held >= self._compact_at and self._deletes_since_compaction:
            self._compact()

    def _track_inserts(self, rows: pa.Table) -> None:
        inserts = rows.filter(pc.equal(rows.column(CHANGE_TYPE), ChangeType.INSERT.value))
        if inserts.num_rows:
            self._inserted.append(inserts.select(self._columns))

    def _compact(self) -> None:
        """Held rows -> their net rows; only the net INSERTs can still be restarted by a carry-over."""
        rows = pa.concat_tables(self._held)
        survivors = rows.take(pa.array(net_row_indices(rows, self._columns), pa.int64()))
        self._held = [survivors] if survivors.num_rows else []
        self._inserted = []
        self._track_inserts(survivors)
        self.rows_held = survivors.num_rows
        self._compact_at = max(self._compact_at, 2 * survivors.num_rows)
        self._deletes_since_compaction = False

    def result(self, key_columns: Sequence[str] = ()) -> pa.Table:
        """The net change rows, ordered by `_change_ordinal`; within one: DELETEs, UPDATE pairs, INSERTs."""
        if not self._held:
            return self.schema.empty_table()
        rows = pa.concat_tables(self._held)
        survivors = rows.take(pa.array(net_row_indices(rows, self._columns), pa.int64()))
        return paired_in_order(survivors, key_columns)


def fold_range(
    schema: pa.Schema, batches: Iterable[tuple[int, pa.RecordBatch]], whole_snapshots: set[int]
) -> NetChanges:
    """`NetChanges` of (snapshot id, batch) in range order; snapshots in `whole_snapshots` (those that
    can both delete and insert, so can hold carry-overs) are gathered whole, others fold per batch."""
    net = NetChanges(schema)
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


def paired_in_order(rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """Net DELETE/INSERT rows with one-DELETE-one-INSERT keys paired, in output order.

    A pair is ordered (and stamped) at the later commit of its two rows: the commit by which
    the key reached its final row.
    """
    is_delete = _is_delete(rows)
    ordinal = np.asarray(rows.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    key_codes = row_codes(rows.select(list(key_columns))) if key_columns else None
    paired = (
        one_delete_one_insert(key_codes, is_delete) if key_codes is not None else np.zeros(rows.num_rows, dtype=bool)
    )
    before = np.nonzero(is_delete & paired)[0]
    if len(before):
        assert key_codes is not None
        after_of = dict(
            zip(key_codes[~is_delete & paired].tolist(), np.nonzero(~is_delete & paired)[0].tolist(), strict=True)
        )
        after = np.array([after_of[k] for k in key_codes[before].tolist()], dtype=np.int64)
    else:
        after = np.empty(0, dtype=np.int64)
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
