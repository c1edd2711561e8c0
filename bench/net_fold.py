"""What folding a range into its net changes costs on the driver (reader/changes/net.py), without Spark.

    .venv/bin/python -m bench.net_fold [--rows N] [--snapshots N] [--updates N] [--carry N]
        [--after-load] [--row-lineage]

A synthetic copy-on-write history: snapshot 0 inserts `--rows` rows (id, v, d); each later
snapshot updates `--updates` random ids (DELETE old + INSERT new) and rewrites `--carry`
unchanged rows (identical DELETE/INSERT carry-over pairs), as a copy-on-write commit reads.
`--after-load`: the range starts after snapshot 0 (the usual case: the table existed before
the range), so only rows inserted in the range (updated rows) keep their carry-overs.
`--row-lineage`: the rows carry `_row_id` (= id: updates and rewrites keep it, as Java's do) and
the fold is keyed by it (`NetChanges(row_lineage=True)`).
Printed: raw change rows, seconds to fold and to build the result (with the ids as key), the
most rows `NetChanges` held, the net rows, and for scale the per-snapshot `reconcile_snapshot`
of the same rows. bench/RESULTS.md has the figures.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from icetail.reader.changes.net import NetChanges
from icetail.reader.changes.reconcile import reconcile_snapshot
from icetail.reader.split.metadata_columns import change_schema
from icetail.reader.split.row_lineage import LINEAGE_FIELDS, ROW_ID, with_lineage_fields

DATA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("d", pa.float64())])
SCHEMA = change_schema(DATA)
LINEAGE_SCHEMA = change_schema(with_lineage_fields(DATA))


def with_row_ids(table: pa.Table) -> pa.Table:
    """The rows with `_row_id` = id and a sequence number = the ordinal, in the lineage schema."""
    ids = table.column("id")
    sequence = table.column("_change_ordinal").cast(pa.int64())
    position = len(DATA)
    table = table.add_column(position, LINEAGE_FIELDS[0], ids).add_column(position + 1, LINEAGE_FIELDS[1], sequence)
    assert table.schema.names[position] == ROW_ID
    return table.cast(LINEAGE_SCHEMA)


def _rows(ids: np.ndarray, version: np.ndarray, kind: str, ordinal: int) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "id": ids,
            "v": pa.array([f"v{i}-{k}" for i, k in zip(ids.tolist(), version.tolist(), strict=True)]),
            "d": ids * 0.25,
            "_change_type": pa.array([kind] * n),
            "_change_ordinal": pa.array(np.full(n, ordinal, dtype=np.int32)),
            "_commit_snapshot_id": pa.array(np.full(n, 1000 + ordinal, dtype=np.int64)),
            "_commit_timestamp": pa.array(np.full(n, ordinal * 1_000_000, dtype=np.int64)).cast(
                pa.timestamp("us", tz="UTC")
            ),
        },
        schema=SCHEMA,
    )


def history(rows: int, snapshots: int, updates: int, carry: int, seed: int = 1) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    version = np.zeros(rows, dtype=np.int64)
    ids = np.arange(rows, dtype=np.int64)
    out = [_rows(ids, version, "INSERT", 0)]
    for ordinal in range(1, snapshots):
        changed = rng.choice(rows, size=updates, replace=False)
        rest = np.setdiff1d(ids, changed)
        carried = rng.choice(rest, size=min(carry, len(rest)), replace=False)
        old = version[changed].copy()
        version[changed] += 1
        parts = [
            _rows(changed, old, "DELETE", ordinal),
            _rows(carried, version[carried], "DELETE", ordinal),
            _rows(carried, version[carried], "INSERT", ordinal),
            _rows(changed, version[changed], "INSERT", ordinal),
        ]
        out.append(pa.concat_tables(parts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--snapshots", type=int, default=10)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--carry", type=int, default=200_000)
    parser.add_argument("--after-load", action="store_true")
    parser.add_argument("--row-lineage", action="store_true")
    args = parser.parse_args()
    snapshots = history(args.rows, args.snapshots, args.updates, args.carry)
    schema = SCHEMA
    if args.row_lineage:
        snapshots, schema = [with_row_ids(t) for t in snapshots], LINEAGE_SCHEMA
    if args.after_load:
        snapshots = snapshots[1:]
    raw = sum(t.num_rows for t in snapshots)

    started = time.perf_counter()
    net = NetChanges(schema, row_lineage=args.row_lineage)
    most_held = 0
    for table in snapshots:
        net.add_snapshot(table)
        most_held = max(most_held, net.rows_held)
    folded = time.perf_counter() - started
    started = time.perf_counter()
    result = net.result(("id",))
    built = time.perf_counter() - started

    started = time.perf_counter()
    per_snapshot = sum(reconcile_snapshot(t, ["id"], row_lineage=args.row_lineage).num_rows for t in snapshots)
    reconciled = time.perf_counter() - started
    print(
        f"raw change rows {raw:,} in {len(snapshots)} snapshots; net: fold {folded:.2f} s, result {built:.2f} s, "
        f"most rows held {most_held:,}, net rows {result.num_rows:,}; "
        f"per-snapshot reconcile of the same rows {reconciled:.2f} s ({per_snapshot:,} rows)"
    )


if __name__ == "__main__":
    main()
