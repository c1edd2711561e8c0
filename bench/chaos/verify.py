"""Exactly once, checked against the source's own snapshots (pyiceberg scans, not icetail).

For every snapshot S on the cursor's ancestry, the changes a sink should hold for S are the rows
of S minus the rows of its parent (INSERTs) and the other way round (DELETEs), as multisets of
whole rows. A change stream holding exactly those for every S is one whose replay in order
equals the table at the cursor, with nothing delivered twice and nothing missing; an update pair
(UPDATE_BEFORE/UPDATE_AFTER) counts as the DELETE and INSERT it stands for. The mirror is
checked as what it is, a table: its rows against the source's at the cursor. A history (SCD
type 2, docs/sinks.md) is checked as the versions the same snapshots imply: for every snapshot S
on the ancestry, a key whose row at S differs from its row at S's parent (or that S added) gets a
version valid from S, and the version it had is valid to S (as is one of a key S deleted); a row
that S left as it was makes no version. `_valid_from`/`_valid_to` are S's commit times.

Rows with a negative `id` are a second writer's (`sink-writer`, bench/chaos/sink_writer.py: the
source's ids are never negative); they are left out here and checked apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from bench.chaos.bus import Envelope
from bench.chaos.places import BUS_SINKS, HISTORIES, Sink

Row = tuple[Any, ...]
Change = tuple[str, int, Row]  # ("I" | "D", commit snapshot id, data row)
SIDE = {"INSERT": "I", "UPDATE_AFTER": "I", "DELETE": "D", "UPDATE_BEFORE": "D"}


@dataclass(frozen=True)
class Verdict:
    expected: int  # change rows (or mirrored rows) the sink must hold
    delivered: int
    lost: int
    duplicated: int  # delivered more than once (at-least-once sinks: allowed, counted apart)
    foreign: int  # delivered, but no snapshot on the ancestry has it
    torn_lines: int = 0
    examples: tuple[str, ...] = ()
    out_of_order: int = 0  # bus sinks: a key's change on the stream after a change of a later snapshot

    def ok(self, exactly_once: bool) -> bool:
        bad_extra = self.duplicated + self.foreign if exactly_once else self.foreign
        return self.lost == 0 and bad_extra == 0 and self.torn_lines == 0 and self.out_of_order == 0


def row_counts(table: pa.Table | None, columns: list[str]) -> Counter[Row]:
    if table is None or table.num_rows == 0:
        return Counter()
    data = [table.column(c).to_pylist() if c in table.column_names else [None] * table.num_rows for c in columns]
    return Counter(zip(*data, strict=True))


def ancestry(table: Table, cursor: int) -> list[tuple[int, int | None]]:
    """(snapshot, parent) from the first snapshot to `cursor`."""
    chain = []
    snap = table.snapshot_by_id(cursor)
    while snap is not None:
        chain.append((snap.snapshot_id, snap.parent_snapshot_id))
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return chain[::-1]


RowsAt = Callable[[int], pa.Table]  # the reference read of the table at a snapshot
VALIDITY = ("_valid_from_snapshot_id", "_valid_to_snapshot_id", "_valid_from", "_valid_to")


def own_rows(rows: pa.Table | None) -> pa.Table | None:
    """`rows` without a second writer's (negative ids)."""
    if rows is None or "id" not in rows.column_names:
        return rows
    return rows.filter(pc.fill_null(pc.greater_equal(rows.column("id"), 0), True))


def foreign_rows(rows: pa.Table | None) -> pa.Table | None:
    if rows is None or "id" not in rows.column_names:
        return None
    return rows.filter(pc.fill_null(pc.less(rows.column("id"), 0), False))


def pyiceberg_rows(table: Table) -> RowsAt:
    """pyiceberg's scan: the reference of the kinds pyiceberg writes (copy-on-write, position deletes)."""
    return lambda snap: table.scan(snapshot_id=snap).to_arrow()


def expected_changes(table: Table, cursor: int, columns: list[str], rows_at: RowsAt | None = None) -> Counter[Change]:
    read = rows_at or pyiceberg_rows(table)
    out: Counter[Change] = Counter()
    before: Counter[Row] = Counter()
    for snap, _parent in ancestry(table, cursor):
        now = row_counts(read(snap), columns)
        for row, n in (now - before).items():
            out[("I", snap, row)] += n
        for row, n in (before - now).items():
            out[("D", snap, row)] += n
        before = now
    return out


def _millis(value: Any) -> int | None:
    """A validity time as epoch milliseconds (a datetime from PostgreSQL or Arrow, or None)."""
    if value is None:
        return None
    return round(value.timestamp() * 1000)


def expected_history(table: Table, snaps: list[int], columns: list[str], read: RowsAt) -> Counter[Row]:
    """The versions the snapshots `snaps` (in order, the first one's rows all inserted by it) imply,
    by `id`: (row..., valid from snapshot, valid to snapshot or None, their commit times in ms)."""
    key = columns.index("id")
    millis = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    out: Counter[Row] = Counter()
    open_: dict[Any, tuple[Row, int]] = {}  # key -> (row, valid from)
    for snap in snaps:
        now: dict[Any, Row] = {}
        for row, n in row_counts(read(snap), columns).items():
            if n != 1 or row[key] in now:
                raise ValueError(f"snapshot {snap}: key {row[key]} twice: no history by key")
            now[row[key]] = row
        for k, (row, since) in list(open_.items()):
            if now.get(k) != row:  # replaced or deleted by `snap`
                out[(*row, since, snap, millis[since], millis[snap])] += 1
                del open_[k]
        for k, row in now.items():
            if k not in open_:
                open_[k] = (row, snap)
    for row, since in open_.values():
        out[(*row, since, None, millis[since], None)] += 1
    return out


def history_versions(rows: pa.Table | None, columns: list[str]) -> Counter[Row]:
    """A history target's versions in `expected_history`'s form."""
    if rows is None or rows.num_rows == 0:
        return Counter()
    out: Counter[Row] = Counter()
    for (*row, since, until, t0, t1), n in row_counts(rows, [*columns, *VALIDITY]).items():
        out[(*row, since, until, _millis(t0), _millis(t1))] += n
    return out


def delivered_changes(rows: pa.Table | None, columns: list[str]) -> Counter[Change]:
    if rows is None or rows.num_rows == 0:
        return Counter()
    data = row_counts(rows, ["_change_type", "_commit_snapshot_id", *columns])
    out: Counter[Change] = Counter()
    for (change, snap, *row), n in data.items():
        out[(SIDE[change], int(snap), tuple(row))] += n
    return out


def jsonl_changes(objects: list[dict[str, Any]], columns: list[str]) -> Counter[Change]:
    out: Counter[Change] = Counter()
    for o in objects:
        out[(SIDE[o["_change_type"]], int(o["_commit_snapshot_id"]), tuple(o.get(c) for c in columns))] += 1
    return out


def envelope_changes(envelopes: list[Envelope], columns: list[str]) -> tuple[Counter[Change], int]:
    """A bus sink's Debezium envelopes as changes (`c`/`r`: an INSERT of `after`, `d`: a DELETE of
    `before`, `u`: both, at the envelope's `source.snapshot_id`), and how many messages are not
    such an envelope or name another snapshot in their metadata than in the envelope (counted as torn)."""
    out: Counter[Change] = Counter()
    bad = 0
    sides = {"c": ("after",), "r": ("after",), "d": ("before",), "u": ("before", "after")}
    for e in envelopes:
        value = e.envelope or {}
        source, op = value.get("source"), value.get("op")
        snap = source.get("snapshot_id") if isinstance(source, dict) else None
        rows: list[tuple[str, dict[str, Any]]] = []
        for side in sides.get(op, ()) if isinstance(op, str) else ():
            row = value.get(side)
            if isinstance(row, dict):
                rows.append((side, row))
        if not rows or len(rows) != len(sides[str(op)]) or not isinstance(snap, int) or str(snap) != e.snapshot_id:
            bad += 1
            continue
        for side, row in rows:
            out[("I" if side == "after" else "D", snap, tuple(row.get(c) for c in columns))] += 1
    return out, bad


def envelope_order(
    envelopes: list[Envelope], snaps: list[int], replayed: frozenset[int] = frozenset(), key: str = "id"
) -> tuple[int, tuple[str, ...]]:
    """How many of a bus sink's envelopes break their key's order, and examples: for each key (its `key`
    column, of `after`, or of `before` for a delete) within a table, its changes must come on the
    stream in the order of their snapshots on the history `snaps` (oldest first), and within one batch
    in change-ordinal order. A change of a `replayed` snapshot (a rewind delivers it again) may follow
    later ones. Envelopes that are not whole, or of snapshots off the history, are counted elsewhere."""
    place = {snap: i for i, snap in enumerate(snaps)}
    last: dict[tuple[Any, ...], tuple[int, int]] = {}
    bad = 0
    examples: list[str] = []
    for n, e in enumerate(envelopes):
        value = e.envelope or {}
        source = value.get("source")
        row = value.get("after") if isinstance(value.get("after"), dict) else value.get("before")
        if not isinstance(source, dict) or not isinstance(row, dict) or source.get("snapshot_id") not in place:
            continue
        snap = source["snapshot_id"]
        at = (place[snap], int(source.get("change_ordinal") or 0))
        who = (source.get("db"), source.get("table"), row.get(key))
        before = last.get(who)
        if before is not None and at[0] < before[0] and snap not in replayed:
            bad += 1
            if len(examples) < 3:
                examples.append(f"out of order: message {n}, key {who}, snapshot {snap} after {snaps[before[0]]}")
        last[who] = at
    return bad, tuple(examples)


def compare(expected: Counter[Any], got: Counter[Any], *, torn: int = 0) -> Verdict:
    lost = expected - got
    extra = got - expected
    duplicated = sum(n for k, n in extra.items() if k in expected)
    foreign = sum(n for k, n in extra.items() if k not in expected)
    examples = [f"lost x{n}: {k}" for k, n in list(lost.items())[:3]]
    examples += [f"extra x{n}: {k}" for k, n in list(extra.items())[:3]]
    return Verdict(
        expected=sum(expected.values()),
        delivered=sum(got.values()),
        lost=sum(lost.values()),
        duplicated=duplicated,
        foreign=foreign,
        torn_lines=torn,
        examples=tuple(examples),
    )


def verify(
    sink: Sink, table: Table, cursor: int, rows_at: RowsAt | None = None, replayed: frozenset[int] = frozenset()
) -> Verdict:
    """What `sink` holds against the source table `table` at snapshot `cursor`; `rows_at` reads the
    table at a snapshot (default pyiceberg's scan; Java's for the kinds Java writes). The changes of
    the `replayed` snapshots are wanted twice (`reset --to` an earlier snapshot delivers them again);
    a mirror holds the table either way."""
    columns = [f.name for f in table.schema().fields]
    read = rows_at or pyiceberg_rows(table)
    if sink.kind in HISTORIES:
        snaps = [snap for snap, _ in ancestry(table, cursor)]
        return compare(expected_history(table, snaps, columns, read), history_versions(own_rows(sink.read()), columns))
    if sink.keyed:
        return compare(row_counts(read(cursor), columns), row_counts(own_rows(sink.read()), columns))
    expected = expected_changes(table, cursor, columns, read)
    expected.update(Counter({k: n for k, n in expected.items() if k[1] in replayed}))
    if sink.kind == "jsonl":
        objects, torn = sink.read_jsonl()
        return compare(expected, jsonl_changes(objects, columns), torn=torn)
    if sink.kind in BUS_SINKS:
        envelopes = sink.read_envelopes()
        got, bad = envelope_changes(envelopes, columns)
        snaps = [snap for snap, _ in ancestry(table, cursor)]
        disorder, why = envelope_order(envelopes, snaps, replayed)
        verdict = compare(expected, got, torn=bad)
        return replace(verdict, out_of_order=disorder, examples=verdict.examples + why)
    return compare(expected, delivered_changes(own_rows(sink.read()), columns))


def sink_changes(sink: Sink, columns: list[str]) -> tuple[Counter[Change], int]:
    """The change rows a sink holds (not the mirror), and its torn lines."""
    if sink.kind == "jsonl":
        objects, torn = sink.read_jsonl()
        return jsonl_changes(objects, columns), torn
    if sink.kind in BUS_SINKS:
        return envelope_changes(sink.read_envelopes(), columns)
    return delivered_changes(own_rows(sink.read()), columns), 0


def verify_reset(
    old: Sink, new: Sink, table: Table, moved_at: int, cursor: int, rows_at: RowsAt | None = None
) -> Verdict:
    """`reset --sink` at cursor `moved_at` (a batch in flight abandoned): the new sink holds exactly the
    changes of the snapshots after `moved_at`; the old one exactly those up to it, plus at most
    chunks of the abandoned batch (each of its changes at most once: no duplicates, nothing foreign)."""
    columns = [f.name for f in table.schema().fields]
    expected = expected_changes(table, cursor, columns, rows_at or pyiceberg_rows(table))
    before = {snap for snap, _ in ancestry(table, moved_at)}
    exp_old = Counter({k: n for k, n in expected.items() if k[1] in before})
    exp_new = expected - exp_old
    got_old, torn_old = sink_changes(old, columns)
    got_new, torn_new = sink_changes(new, columns)
    disorder, why = 0, ()
    if old.kind in BUS_SINKS:  # each stream on its own: the old one's abandoned chunks come after its part
        snaps = [snap for snap, _ in ancestry(table, cursor)]
        (n_old, why_old), (n_new, why_new) = (envelope_order(s.read_envelopes(), snaps) for s in (old, new))
        disorder, why = n_old + n_new, why_old + why_new
    old_part = Counter({k: n for k, n in got_old.items() if k[1] in before})
    abandoned = got_old - old_part  # chunks of the abandoned batch: a part of exp_new, none twice
    a = compare(exp_old, old_part, torn=torn_old)
    b = compare(exp_new, got_new, torn=torn_new)
    extra = abandoned - exp_new
    return Verdict(
        expected=a.expected + b.expected,
        delivered=a.delivered + b.delivered + sum(abandoned.values()),
        lost=a.lost + b.lost,
        duplicated=a.duplicated + b.duplicated + sum(n for k, n in extra.items() if k in exp_new),
        foreign=a.foreign + b.foreign + sum(n for k, n in extra.items() if k not in exp_new),
        torn_lines=a.torn_lines + b.torn_lines,
        examples=a.examples + b.examples + why,
        out_of_order=disorder,
    )
