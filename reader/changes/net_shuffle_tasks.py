"""Spark task side of a partitioned net fold (reader/changes/net_shuffle.py): records in, records out.

A record is (partition, (sort key, kind, payload)); kinds name the stage whose input a piece of
rows is ("rows:N" without lineage; "rows:A" to "rows:D" and "pairs:D" with it), or carry a read
chunk's metadata, a read error, a row id's lost-lineage probe or the not-exact flag. A stage
task folds the records of its own kind and passes every other record on to the same partition.
Rows carry their place in the plan (shuffle_tasks.ORDER_COLUMN), so every stage sees its rows in
plan order, as the driver would, whatever order the shuffle brought them in: a replay computes
the same rows for the same output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail.reader.changes.net import (
    ROW_KEY,
    NetChanges,
    data_columns,
    finished,
    is_delete_row,
    net_by_row_id,
)
from icetail.reader.changes.reconcile import HIDDEN_PREFIX, cancelled_rows, lineage_pairs
from icetail.reader.changes.shuffle_tasks import (
    ERROR_KIND,
    META_KIND,
    ORDER_COLUMN,
    change_counts,
    ipc_bytes,
    partitioned_rows,
    read_in_plan_order,
    release_memory,
    with_order_fields,
)
from icetail.reader.changes.stable_hash import hashable_columns
from icetail.reader.spark.payloads import SplitRequest
from icetail.reader.split.context import ReadContext
from icetail.reader.split.equality import row_codes
from icetail.reader.split.metadata_columns import CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID
from icetail.reader.split.row_lineage import ROW_ID, without_lineage

if TYPE_CHECKING:
    from icetail.reader.changes.net_shuffle import NetShuffleSpec
    from icetail.reader.changes.shuffle import ShuffleOutput

_META, _ERROR = META_KIND, ERROR_KIND  # records of the read (read_in_plan_order)
_FLAG, _PROBE, _PAIRS = "flag", "probe", "pairs:D"
_NEXT = {"A": "rows:B", "B": "rows:C", "C": "rows:D"}
TAG = HIDDEN_PREFIX + "net_pair"  # stage C's input: 0 a single change, 1 a changed lineage pair, 2 an unchanged one
_SINGLE, _CHANGED, _UNCHANGED = 0, 1, 2
_Key = tuple[int, int, int]  # (stage, source split or partition, row or piece)
_Record = tuple[int, tuple[_Key, str, Any]]


def net_read_task(
    context: ReadContext, spec: NetShuffleSpec, part: Iterable[list[tuple[int, SplitRequest]]]
) -> Iterator[_Record]:
    """Read the task's splits; rows go to their first stage's partitions, metadata to `first_output`."""
    yield from read_in_plan_order(
        context,
        part,
        spec.chunk_rows,
        spec.first_output,
        lambda split, row: (0, split, row),
        lambda rows, key: routed(spec, rows, key),
    )


def routed(spec: NetShuffleSpec, rows: pa.Table, key: tuple[int, int, int]) -> Iterator[_Record]:
    """Read rows (with their place in the plan) to their first stage: by key without lineage; with it,
    rows with a row id to stage A by it, the others to stage B by key."""
    if not spec.row_lineage:
        yield from _sent(spec, rows, key, "rows:N", _key_hash(spec, rows))
        return
    has_id = rows.column(ROW_ID).is_valid()
    yield from _sent(spec, rows.filter(has_id), key, "rows:A", (ROW_ID,))
    no_id = rows.filter(pc.invert(has_id))
    yield from _sent(spec, no_id, key, "rows:B", _key_hash(spec, no_id))


def lineage_stage(spec: NetShuffleSpec, stage: str, p: int, part: Iterable[_Record]) -> Iterator[_Record]:
    """Stage A, B or C of partition `p` (reader/changes/net_shuffle.py); other records pass on."""
    pieces: list[tuple[_Key, bytes]] = []
    probes: list[tuple[_Key, bytes]] = []
    for target, (key, kind, payload) in part:
        if kind == f"rows:{stage}":
            pieces.append((key, payload))
        elif stage == "C" and kind == _PROBE:
            probes.append((key, payload))
        else:
            yield target, (key, kind, payload)
    schema = _stage_schema(spec, stage)
    rows = _in_plan_order(_decoded(pieces, schema))
    source: _Key = (ord(stage), p, 0)
    if stage == "A":
        yield from _settle_lineage_pairs(spec, source, rows)
    elif stage == "B":
        yield from _content_rules(spec, source, p, rows)
    else:
        yield from _by_row_id(spec, source, p, rows, _decoded(probes, _PROBE_SCHEMA))
    release_memory()


def net_output_task(spec: NetShuffleSpec, index: int, part: Iterable[_Record]) -> Iterator[ShuffleOutput]:
    """Output `index`: its partition's net rows (the last stage), returned as Arrow IPC bytes."""
    from icetail.reader.changes.shuffle import ShuffleOutput

    rows_pieces: list[tuple[_Key, bytes]] = []
    pair_pieces: list[tuple[_Key, bytes]] = []
    carried: list[tuple[_Key, str, Any]] = []
    for _, (key, kind, payload) in part:
        if kind in ("rows:N", "rows:D"):
            rows_pieces.append((key, payload))
        elif kind == _PAIRS:
            pair_pieces.append((key, payload))
        else:
            carried.append((key, kind, payload))
    carried.sort(key=lambda record: record[0])
    read = tuple(payload for _, kind, payload in carried if kind == _META)
    errors = [payload for _, kind, payload in carried if kind == _ERROR]
    if errors:
        yield ShuffleOutput(index, b"", None, (), read, errors[0])
        return
    flags = [payload for _, kind, payload in carried if kind == _FLAG]
    if flags:
        yield ShuffleOutput(index, b"", None, (), read, not_exact=str(flags[0]))
        return
    base = with_order_fields(spec.read_schema)
    if spec.row_lineage:
        net = _finished(spec, _decoded(rows_pieces, base), pair_pieces)
    else:
        net = _folded(spec, _in_plan_order(_decoded(rows_pieces, base))).result(spec.pair_columns)
    net = net.drop_columns([ORDER_COLUMN])
    if not spec.output_lineage:
        net = without_lineage(net)
    counts = change_counts(net)
    release_memory()
    yield ShuffleOutput(index, ipc_bytes(net) if net.num_rows else b"", None, counts, read)


def _folded(spec: NetShuffleSpec, rows: pa.Table) -> NetChanges:
    """`NetChanges` of the rows (no lineage), snapshot by snapshot as `net.fold_range` feeds it."""
    net = NetChanges(rows.schema)
    for snapshot_id, start, end in _snapshot_runs(rows):
        run = rows.slice(start, end - start)
        if snapshot_id in spec.whole_snapshots:
            net.add_snapshot(run)
        else:
            net.add_rows(run)
    return net


def _settle_lineage_pairs(spec: NetShuffleSpec, source: _Key, rows: pa.Table) -> Iterator[_Record]:
    """Stage A (by row id): each whole snapshot's lineage pairs (one DELETE and one INSERT of a row
    id) stay for stage C, tagged changed or unchanged; the rest go to stage B by key. Rows of other
    snapshots are single changes of their row id."""
    n = rows.num_rows
    tags = np.full(n, _SINGLE, dtype=np.int8)
    to_content = np.zeros(n, dtype=bool)
    columns = data_columns(rows.schema)
    for snapshot_id, start, end in _snapshot_runs(rows):
        if snapshot_id not in spec.whole_snapshots:
            continue
        run = rows.slice(start, end - start)
        before, after = lineage_pairs(run.column(ROW_ID), is_delete_row(run))
        settled = np.zeros(end - start, dtype=bool)
        settled[before] = settled[after] = True
        codes = row_codes(run.select(columns))
        tag = np.where(codes[before] == codes[after], _UNCHANGED, _CHANGED).astype(np.int8)
        tags[start + before] = tag
        tags[start + after] = tag
        to_content[start:end] = ~settled
    stays = pa.array(~to_content)
    pairs = rows.filter(stays).append_column(pa.field(TAG, pa.int8(), nullable=False), pa.array(tags[~to_content]))
    rest = rows.filter(pa.array(to_content))
    yield from _sent(spec, pairs, source, "rows:C", (ROW_ID,))
    yield from _sent(spec, rest, source, "rows:B", _key_hash(spec, rest))


def _content_rules(spec: NetShuffleSpec, source: _Key, p: int, rows: pa.Table) -> Iterator[_Record]:
    """Stage B (by key): per whole snapshot, identical DELETE/INSERT rows cancel as carry-overs (those
    of rows inserted earlier in the range go into the count); rows left with a row id go to stage C,
    the others into the count, whose net rows go to stage D. A carry-over pair of two row ids is a
    probe for stage C: lost lineage matters if the old id changed earlier in the range."""
    count = NetChanges(rows.schema)
    to_row_id = np.zeros(rows.num_rows, dtype=bool)
    columns = data_columns(rows.schema)
    probes: list[pa.Table] = []
    for snapshot_id, start, end in _snapshot_runs(rows):
        run = rows.slice(start, end - start)
        if snapshot_id not in spec.whole_snapshots:
            count.add_rows(run)  # only rows without a row id: stage A kept the others
            continue
        codes = row_codes(run.select(columns))
        is_delete = is_delete_row(run)
        cancelled = cancelled_rows(codes, is_delete)
        probes.append(_lost_lineage(run, codes, is_delete, cancelled))
        single = ~cancelled & np.asarray(run.column(ROW_ID).is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        to_row_id[start:end] = single
        count.add_reconciled(run.filter(pa.array(~single)), cancelled[~single])
    singles = rows.filter(pa.array(to_row_id))
    tagged = singles.append_column(
        pa.field(TAG, pa.int8(), nullable=False), pa.array(np.full(singles.num_rows, _SINGLE, dtype=np.int8))
    )
    yield from _sent(spec, tagged, source, "rows:C", (ROW_ID,))
    if probes:
        yield from _sent(spec, pa.concat_tables(probes), source, _PROBE, (ROW_ID,), to_outputs=False)
    survivors = count.survivors()
    if survivors.num_rows and p >= spec.first_output:
        yield p, (source, "rows:D", ipc_bytes(survivors))


def _by_row_id(spec: NetShuffleSpec, source: _Key, p: int, rows: pa.Table, probes: pa.Table) -> Iterator[_Record]:
    """Stage C (by row id): each row id's changes reduce to its first and last (an unchanged pair
    counts only for a row id changed in an earlier snapshot); its net DELETE/INSERT rows go to stage
    D by key, its UPDATE pairs stay together."""
    ids = _plain_ids(rows.column(ROW_ID))
    ordinal = np.asarray(rows.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    tags = np.asarray(rows.column(TAG).to_numpy(), dtype=np.int8)
    first_held = _first_held(ids[tags != _UNCHANGED], ordinal[tags != _UNCHANGED])
    kept = (tags != _UNCHANGED) | (first_held(ids) < ordinal)
    probe_ids = _plain_ids(probes.column(ROW_ID))
    moved = first_held(probe_ids) < np.asarray(probes.column(CHANGE_ORDINAL).to_numpy(), dtype=np.int64)
    if moved.any():
        reason = f"row id {int(probe_ids[moved][0])}, changed in the range, was rewritten under another row id"
        yield spec.first_output, (source, _FLAG, reason)
    rows = rows.filter(pa.array(kept)).drop_columns([TAG])
    if not rows.num_rows:
        return
    keyed = rows.append_column(ROW_KEY, pa.array(ids[kept], pa.int64()))
    singles, before, after = (t.drop_columns([ROW_KEY]) for t in net_by_row_id(keyed, data_columns(rows.schema)))
    yield from _sent(spec, singles, source, "rows:D", _key_hash(spec, singles))
    if before.num_rows and p >= spec.first_output:
        yield p, (source, _PAIRS, ipc_bytes(pa.concat_tables([before, after])))


def _finished(spec: NetShuffleSpec, singles: pa.Table, pair_pieces: list[tuple[_Key, bytes]]) -> pa.Table:
    """Stage D: the partition's net DELETE/INSERT rows cancelled by content and paired by key, with
    the row ids' UPDATE pairs (each piece: its before images, then their after images)."""
    pair_pieces.sort(key=lambda piece: piece[0])
    befores, afters = [], []
    for _, payload in pair_pieces:
        pairs = pa.ipc.open_stream(payload).read_all().cast(singles.schema)
        half = pairs.num_rows // 2
        befores.append(pairs.slice(0, half))
        afters.append(pairs.slice(half))
    before = pa.concat_tables(befores) if befores else singles.schema.empty_table()
    after = pa.concat_tables(afters) if afters else singles.schema.empty_table()
    if not (singles.num_rows or before.num_rows):
        return singles
    return finished(singles, before, after, data_columns(singles.schema), spec.pair_columns)


def _lost_lineage(run: pa.Table, codes: np.ndarray, is_delete: np.ndarray, cancelled: np.ndarray) -> pa.Table:
    """(old row id, ordinal) of the carry-over pairs whose two rows have different row ids, aligned
    as `NetChanges._follow_lost_lineage` aligns them."""
    index = np.flatnonzero(cancelled)
    deletes, inserts = index[is_delete[index]], index[~is_delete[index]]
    deletes = deletes[np.lexsort((deletes, codes[deletes]))]
    inserts = inserts[np.lexsort((inserts, codes[inserts]))]
    old = run.column(ROW_ID).take(pa.array(deletes, pa.int64()))
    new = run.column(ROW_ID).take(pa.array(inserts, pa.int64()))
    both = np.asarray(pc.and_(old.is_valid(), new.is_valid()).to_numpy(zero_copy_only=False), dtype=bool)
    differ = both & (_plain_ids(old) != _plain_ids(new))
    ordinals = run.column(CHANGE_ORDINAL).take(pa.array(deletes[differ], pa.int64()))
    return pa.table(
        {ROW_ID: pa.array(_plain_ids(old)[differ], pa.int64()), CHANGE_ORDINAL: ordinals.cast(pa.int64())},
        schema=_PROBE_SCHEMA,
    )


_PROBE_SCHEMA = pa.schema([pa.field(ROW_ID, pa.int64()), pa.field(CHANGE_ORDINAL, pa.int64())])


def _first_held(ids: np.ndarray, ordinals: np.ndarray) -> Any:
    """A lookup: row ids -> the first ordinal at which each was held (a change of it), else int64 max."""
    order = np.lexsort((ordinals, ids))
    ids, ordinals = ids[order], ordinals[order]
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.empty(0, dtype=bool)
    known, at = ids[first], ordinals[first]
    never = np.iinfo(np.int64).max

    def lookup(wanted: np.ndarray) -> np.ndarray:
        if not len(known):
            return np.full(len(wanted), never, dtype=np.int64)
        position = np.minimum(np.searchsorted(known, wanted), len(known) - 1)
        return np.where(known[position] == wanted, at[position], never)

    return lookup


def _plain_ids(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(ids, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _sent(
    spec: NetShuffleSpec,
    rows: pa.Table,
    key: _Key,
    kind: str,
    columns: Sequence[str],
    *,
    to_outputs: bool | None = None,
) -> Iterator[_Record]:
    """`rows` cut by the hash of `columns`; pieces for outputs already delivered are left out."""
    final = kind in ("rows:N", "rows:D") if to_outputs is None else to_outputs
    for target, piece in partitioned_rows(rows, columns, spec.partitions):
        if not final or target >= spec.first_output:
            yield target, (key, kind, ipc_bytes(piece))


def _key_hash(spec: NetShuffleSpec, rows: pa.Table) -> tuple[str, ...]:
    return hashable_columns(rows.schema, spec.key_columns)


def _stage_schema(spec: NetShuffleSpec, stage: str) -> pa.Schema:
    base = with_order_fields(spec.read_schema)
    return base.append(pa.field(TAG, pa.int8(), nullable=False)) if stage == "C" else base


def _decoded(pieces: list[tuple[_Key, bytes]], schema: pa.Schema) -> pa.Table:
    """The pieces' rows, in the order of their sort keys."""
    pieces.sort(key=lambda piece: piece[0])
    tables = []
    while pieces:  # each piece's bytes go as soon as its rows are decoded
        tables.append(pa.ipc.open_stream(pieces.pop(0)[1]).read_all())
    if not tables:
        return schema.empty_table()
    rows = pa.concat_tables(tables)
    return rows if rows.schema == schema else rows.cast(schema)


def _in_plan_order(rows: pa.Table) -> pa.Table:
    order = rows.column(ORDER_COLUMN).to_numpy()
    if len(order) > 1 and bool((order[1:] < order[:-1]).any()):
        rows = rows.take(pa.array(np.argsort(order, kind="stable")))
    return rows


def _snapshot_runs(rows: pa.Table) -> list[tuple[int, int, int]]:
    """(snapshot id, start, end) of each run of rows of one snapshot, in plan order."""
    n = rows.num_rows
    if not n:
        return []
    ids = np.asarray(rows.column(COMMIT_SNAPSHOT_ID).to_numpy(), dtype=np.int64)
    bounds = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts, ends = np.r_[0, bounds], np.r_[bounds, n]
    return [(int(ids[s]), int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
