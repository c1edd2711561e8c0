"""The oracle: what icetail must emit, derived only from what the Java reader returns.

For a snapshot S with parent P (rows at X = Java's `VERSION AS OF X`, projected by field id onto
the to-snapshot's schema):

    DELETE + UPDATE_BEFORE rows of S  ==  multiset(rows at P) - multiset(rows at S)
    INSERT + UPDATE_AFTER  rows of S  ==  multiset(rows at S) - multiset(rows at P)

Replace snapshots (compaction) emit nothing, `_change_ordinal` numbers the non-replace snapshots of
the range from 0, and replaying every change of a range onto the rows at its start reproduces the
rows at its end.

Rows are compared as multisets of tuples of Python values: floats exactly, NaN equal to NaN
(through a sentinel), None as None, nested values as tuples.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_TIMESTAMP = "_commit_timestamp"
METADATA_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP)
DELETE_TYPES = ("DELETE", "UPDATE_BEFORE")
INSERT_TYPES = ("INSERT", "UPDATE_AFTER")
REPLACE = "replace"
MAX_ROWS_IN_REPORT = 12


class _NaN:
    """Stand-in for float NaN so that NaN == NaN inside tuples and Counters."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NaN)

    def __hash__(self) -> int:
        return hash("NaN")

    def __repr__(self) -> str:
        return "NaN"


NAN = _NaN()


def normalize(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, list | tuple):
        return tuple(normalize(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, normalize(v)) for k, v in value.items()))
    return value


def row_tuples(table: pa.Table, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    columns = list(columns) if columns is not None else table.column_names
    if table.num_rows == 0:
        return []
    values = [[normalize(v) for v in table.column(c).to_pylist()] for c in columns]
    return list(zip(*values, strict=True)) if values else [() for _ in range(table.num_rows)]


def field_id_of(arrow_field: pa.Field) -> int | None:
    meta = arrow_field.metadata or {}
    raw = meta.get(b"PARQUET:field_id") or meta.get(b"field_id")
    return int(raw) if raw is not None else None


def project_rows(rows: Any, to_schema: Any) -> Counter[tuple[Any, ...]]:
    """Multiset of a `SnapshotRows`, projected by field id onto `to_schema` at every depth."""
    return Counter(canonical_rows(rows.table, rows.schema, to_schema))


def canonical_rows(table: pa.Table, from_schema: Any, to_schema: Any) -> list[tuple[Any, ...]]:
    """Rows of `table` (columns named as in `from_schema`) as hashable tuples shaped by `to_schema`.

    Matching is by field id at every level: a struct becomes the tuple of its `to_schema` fields
    (NULL where `from_schema` lacks one), a list a tuple, a map its entries sorted (maps have no
    order), NaN the `NAN` sentinel. Both sides of a comparison go through this, so nested
    renames, added fields and promoted element types compare as Java reads them.
    """
    from_struct, to_struct = from_schema.as_struct(), to_schema.as_struct()
    n = table.num_rows
    columns = []
    for to_field in to_struct.fields:
        from_field = _field_by_id(from_struct, to_field.field_id)
        if from_field is None:
            columns.append([None] * n)  # added after that snapshot
            continue
        values = table.column(from_field.name).to_pylist()
        columns.append([_canonical(v, from_field.field_type, to_field.field_type) for v in values])
    if not columns:
        return [() for _ in range(n)]
    return list(zip(*columns, strict=True))


def _field_by_id(struct: Any, field_id: int) -> Any:
    return next((f for f in struct.fields if f.field_id == field_id), None)


def _canonical(value: Any, from_type: Any, to_type: Any) -> Any:
    from pyiceberg.types import ListType, MapType, StructType

    if value is None:
        return None
    if isinstance(to_type, StructType):
        out = []
        for to_field in to_type.fields:
            from_field = _field_by_id(from_type, to_field.field_id)
            inner = value.get(from_field.name) if from_field is not None else None
            out.append(_canonical(inner, from_field.field_type, to_field.field_type) if from_field else None)
        return tuple(out)
    if isinstance(to_type, ListType):
        return tuple(_canonical(v, from_type.element_type, to_type.element_type) for v in value)
    if isinstance(to_type, MapType):
        entries = value.items() if isinstance(value, dict) else value
        pairs = [
            (
                _canonical(k, from_type.key_type, to_type.key_type),
                _canonical(v, from_type.value_type, to_type.value_type),
            )
            for k, v in entries
        ]
        return tuple(sorted(pairs, key=repr))
    return normalize(value)


def rows_at(catalog: Any, ident: str, snapshot_id: int | None, to_schema: Any) -> Counter[tuple[Any, ...]]:
    if snapshot_id is None:
        return Counter()
    return project_rows(catalog.snapshot_rows(ident, snapshot_id), to_schema)


def expected_changes(
    catalog: Any, ident: str, parent_id: int | None, snapshot_id: int, to_schema: Any
) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """(deletes, inserts) multisets Java implies for `snapshot_id` relative to `parent_id`."""
    before = rows_at(catalog, ident, parent_id, to_schema)
    after = rows_at(catalog, ident, snapshot_id, to_schema)
    return before - after, after - before


# --------------------------------------------------------------------------------------------
# Ranges
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeSnapshot:
    snapshot_id: int
    parent_id: int | None
    operation: str
    timestamp_ms: int
    ordinal: int | None  # None for replace snapshots


def range_snapshots(table: Any, from_exclusive: int | None, to_inclusive: int | None) -> list[RangeSnapshot]:
    """Snapshots of (from_exclusive, to_inclusive] on the ancestry of `to_inclusive`, oldest first."""
    to_id = to_inclusive
    if to_id is None:
        current = table.current_snapshot()
        to_id = current.snapshot_id if current is not None else None
    chain = []
    snap = table.snapshot_by_id(to_id) if to_id is not None else None
    while snap is not None and snap.snapshot_id != from_exclusive:
        chain.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    if from_exclusive is not None and snap is None:
        raise AssertionError(f"{from_exclusive} is not an ancestor of {to_id}")
    chain.reverse()
    out = []
    ordinal = 0
    for s in chain:
        op = s.summary.operation.value if s.summary is not None else "unknown"
        if op == REPLACE:
            out.append(RangeSnapshot(s.snapshot_id, s.parent_snapshot_id, op, s.timestamp_ms, None))
        else:
            out.append(RangeSnapshot(s.snapshot_id, s.parent_snapshot_id, op, s.timestamp_ms, ordinal))
            ordinal += 1
    return out


def _schema_of(table: Any, snapshot_id: int | None) -> Any:
    if snapshot_id is None:
        return table.schema()
    snap = table.snapshot_by_id(snapshot_id)
    return table.schemas()[snap.schema_id]


def _fmt(counter: Counter[tuple[Any, ...]], names: Sequence[str]) -> list[str]:
    lines = []
    for row, count in sorted(counter.items(), key=lambda kv: repr(kv[0]))[:MAX_ROWS_IN_REPORT]:
        rendered = ", ".join(f"{n}={v!r}" for n, v in zip(names, row, strict=True))
        lines.append(f"      {count} x ({rendered})")
    if len(counter) > MAX_ROWS_IN_REPORT:
        lines.append(f"      ... {len(counter) - MAX_ROWS_IN_REPORT} more distinct rows")
    return lines


def _diff_lines(label: str, actual: Counter[Any], expected: Counter[Any], names: Sequence[str]) -> list[str]:
    lines = []
    extra = actual - expected
    missing = expected - actual
    if extra:
        lines.append(f"    extra {label} rows (icetail emitted, Java does not imply):")
        lines += _fmt(extra, names)
    if missing:
        lines.append(f"    missing {label} rows (Java implies, icetail did not emit):")
        lines += _fmt(missing, names)
    return lines


def _epoch_ms(column: pa.ChunkedArray) -> list[int | None]:
    if pa.types.is_timestamp(column.type):
        as_ms = pc.cast(column, pa.timestamp("ms", tz=column.type.tz), safe=False)
        return pc.cast(as_ms, pa.int64()).to_pylist()
    return column.to_pylist()


def check_changes(
    actual: pa.Table,
    catalog: Any,
    ident: str,
    from_exclusive: int | None = None,
    to_inclusive: int | None = None,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> list[str]:
    """Every way `actual` (read_changes output) disagrees with Java, as report lines.

    `keep`: the rows a row filter selects (a predicate on a row as {column: value}); Java's rows
    at every snapshot are filtered by it first (the filtered view `--filter` promises).
    """
    table = catalog.load_table(ident)
    snaps = range_snapshots(table, from_exclusive, to_inclusive)
    to_id = snaps[-1].snapshot_id if snaps else (to_inclusive if to_inclusive is not None else from_exclusive)
    to_schema = _schema_of(table, to_id)
    names = [f.name for f in to_schema.fields]
    where = f"table {catalog.fq(ident)} range ({from_exclusive}, {to_inclusive}]"
    problems: list[str] = []

    data_cols = [c for c in actual.column_names if c not in METADATA_COLUMNS]
    missing_meta = [c for c in METADATA_COLUMNS if c not in actual.column_names]
    if missing_meta:
        return [f"{where}: output lacks metadata columns {missing_meta}; columns={actual.column_names}"]
    if data_cols != names:
        problems.append(f"{where}: data columns {data_cols} != to-snapshot schema {names} (schema of {to_id})")
        if set(data_cols) != set(names):
            return problems
    for c in METADATA_COLUMNS:
        if actual.column(c).null_count:
            problems.append(f"{where}: {c} has {actual.column(c).null_count} nulls")

    types = actual.column(CHANGE_TYPE).to_pylist()
    bad_types = set(types) - set(DELETE_TYPES) - set(INSERT_TYPES)
    if bad_types:
        problems.append(f"{where}: unknown {CHANGE_TYPE} values {sorted(map(str, bad_types))}")
    snap_ids = actual.column(COMMIT_SNAPSHOT_ID).to_pylist()
    ordinals = actual.column(CHANGE_ORDINAL).to_pylist()
    stamps = _epoch_ms(actual.column(COMMIT_TIMESTAMP))
    rows = canonical_rows(actual.select(names), to_schema, to_schema)

    by_snapshot: dict[int, list[int]] = {}
    for i, sid in enumerate(snap_ids):
        by_snapshot.setdefault(sid, []).append(i)
    known = {s.snapshot_id for s in snaps}
    for sid in sorted(set(by_snapshot) - known, key=str):
        problems.append(f"{where}: {len(by_snapshot[sid])} rows carry _commit_snapshot_id {sid}, not in the range")

    def at(snapshot_id: int | None) -> Counter[tuple[Any, ...]]:
        found = rows_at(catalog, ident, snapshot_id, to_schema)
        if keep is None:
            return found
        return Counter({row: n for row, n in found.items() if keep(dict(zip(names, row, strict=True)))})

    state = at(from_exclusive)
    for snap in snaps:
        idx = by_snapshot.get(snap.snapshot_id, [])
        label = (
            f"{where} snapshot {snap.snapshot_id} "
            f"(parent {snap.parent_id}, {snap.operation}, ordinal {snap.ordinal})"
        )
        if snap.ordinal is None:
            if idx:
                problems.append(f"{label}: replace snapshot emitted {len(idx)} rows")
            continue
        got_ord = {ordinals[i] for i in idx}
        if got_ord and got_ord != {snap.ordinal}:
            problems.append(f"{label}: _change_ordinal values {sorted(got_ord)} != {snap.ordinal}")
        got_ts = {stamps[i] for i in idx}
        if got_ts and got_ts != {snap.timestamp_ms}:
            problems.append(f"{label}: _commit_timestamp {sorted(got_ts)} != {snap.timestamp_ms} ms")
        deletes = Counter(rows[i] for i in idx if types[i] in DELETE_TYPES)
        inserts = Counter(rows[i] for i in idx if types[i] in INSERT_TYPES)
        before, after = at(snap.parent_id), at(snap.snapshot_id)
        exp_del, exp_ins = before - after, after - before
        if carry_over_removal:
            lines = _diff_lines("DELETE/UPDATE_BEFORE", deletes, exp_del, names)
            lines += _diff_lines("INSERT/UPDATE_AFTER", inserts, exp_ins, names)
        else:
            # Carry-over rows stay: deletes - inserts must still net to the Java difference.
            lines = _diff_lines("net DELETE", deletes - inserts, exp_del, names)
            lines += _diff_lines("net INSERT", inserts - deletes, exp_ins, names)
        if lines:
            problems.append(f"{label}:")
            problems += lines
        if identifier_columns:
            problems += _check_update_pairs(label, actual, idx, types, identifier_columns)
        # replay
        if deletes - state:
            problems.append(f"{label}: replay deletes rows not present before the snapshot:")
            problems += _fmt(deletes - state, names)
        state = (state - deletes) + inserts
    final = at(to_id)
    if not problems and state != final:
        problems.append(f"{where}: replaying the changes does not reproduce the rows at {to_id}:")
        problems += _diff_lines("replayed", state, final, names)
    return problems


def _check_update_pairs(
    label: str, actual: pa.Table, idx: Iterable[int], types: list[str], identifier_columns: Sequence[str]
) -> list[str]:
    keys = row_tuples(actual, identifier_columns)
    before: Counter[tuple[Any, ...]] = Counter()
    after: Counter[tuple[Any, ...]] = Counter()
    for i in idx:
        if types[i] == "UPDATE_BEFORE":
            before[keys[i]] += 1
        elif types[i] == "UPDATE_AFTER":
            after[keys[i]] += 1
    if before != after:
        return [f"{label}: unpaired UPDATE_BEFORE/UPDATE_AFTER keys: before-only {dict(before - after)}, "
                f"after-only {dict(after - before)}"]
    return []


def assert_changes_match(
    actual: pa.Table,
    catalog: Any,
    ident: str,
    from_exclusive: int | None = None,
    to_inclusive: int | None = None,
    identifier_columns: Sequence[str] | None = None,
    carry_over_removal: bool = True,
    context: str = "",
) -> None:
    problems = check_changes(
        actual, catalog, ident, from_exclusive, to_inclusive, identifier_columns, carry_over_removal
    )
    if problems:
        message = "\n".join(problems)
        if context:
            message += "\n" + context
        raise AssertionError(message)


# --------------------------------------------------------------------------------------------
# A reference change table built from the oracle (to self-test the checker, and as an example
# of the output layout read_changes must produce)
# --------------------------------------------------------------------------------------------


def _denormalize(value: Any) -> Any:
    if value is NAN:
        return float("nan")
    return value


def oracle_changes(
    catalog: Any, ident: str, from_exclusive: int | None = None, to_inclusive: int | None = None
) -> pa.Table:
    """The change table Java implies for a range (DELETE/INSERT only, no update pairing)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    table = catalog.load_table(ident)
    snaps = range_snapshots(table, from_exclusive, to_inclusive)
    to_id = snaps[-1].snapshot_id if snaps else to_inclusive
    to_schema = _schema_of(table, to_id)
    names = [f.name for f in to_schema.fields]
    records: list[dict[str, Any]] = []
    for snap in snaps:
        if snap.ordinal is None:
            continue
        deletes, inserts = expected_changes(catalog, ident, snap.parent_id, snap.snapshot_id, to_schema)
        for change_type, counter in (("DELETE", deletes), ("INSERT", inserts)):
            for row, count in counter.items():
                rec = {n: _denormalize(v) for n, v in zip(names, row, strict=True)}
                rec.update({
                    CHANGE_TYPE: change_type,
                    CHANGE_ORDINAL: snap.ordinal,
                    COMMIT_SNAPSHOT_ID: snap.snapshot_id,
                    COMMIT_TIMESTAMP: snap.timestamp_ms * 1000,
                })
                records.extend([rec] * count)
    data_schema = schema_to_pyarrow(to_schema)
    schema = pa.schema([
        *data_schema,
        pa.field(CHANGE_TYPE, pa.string(), nullable=False),
        pa.field(CHANGE_ORDINAL, pa.int32(), nullable=False),
        pa.field(COMMIT_SNAPSHOT_ID, pa.int64(), nullable=False),
        pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
    ])
    return pa.Table.from_pylist(records, schema=schema)
