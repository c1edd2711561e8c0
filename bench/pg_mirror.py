"""The PostgreSQL mirror's apply cost against hand-written PostgreSQL loads of the same rows.

    .venv/bin/python -m bench.pg_mirror [--rows N] [--chunk-rows N] [--rounds N] [--pg URL]

Driver side only (no Spark: the read is measured by the other cases); the rows start in Arrow,
as the sink receives them. Two cases, each timed `--rounds` times, rows/s and ratios printed:

* inserts: N INSERT change rows applied by the mirror (`PostgresMirrorSink.write`, chunks of
  `--chunk-rows`) into an empty table, against a raw COPY of the same rows into an empty table
  (Arrow's CSV writer, one COPY): goal >= 0.7x;
* mixed: N changes (50% updates as UPDATE_BEFORE/UPDATE_AFTER pairs, 10% deletes, 40% inserts)
  applied to a table holding N rows, against a hand-written COPY of the same net rows into a
  staging table and one MERGE (PostgreSQL 15): goal >= 0.8x.

Columns as bench/generate.py's: id bigint (key), ts timestamptz, k int, amount double (5% null),
name text (5% null), category text, flag boolean, day date.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from icetail.sinks.base import ChunkKey
from icetail.sinks.postgres.mirror import PostgresMirrorSink

PG = "postgresql://postgres@127.0.0.1:5432/test"
DATA = pa.schema(
    [
        pa.field(name, type_, nullable=name != "id", metadata={b"PARQUET:field_id": str(i + 1).encode()})
        for i, (name, type_) in enumerate(
            [
                ("id", pa.int64()),
                ("ts", pa.timestamp("us", tz="UTC")),
                ("k", pa.int32()),
                ("amount", pa.float64()),
                ("name", pa.large_string()),
                ("category", pa.large_string()),
                ("flag", pa.bool_()),
                ("day", pa.date32()),
            ]
        )
    ]
)
DDL = (
    "(id bigint PRIMARY KEY, ts timestamptz, k integer, amount double precision, name text, category text, "
    "flag boolean, day date)"
)
COLUMNS = DATA.names


def data_rows(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    amount = pa.array(rng.normal(100, 30, n), mask=rng.random(n) < 0.05)
    names = pa.array([f"name-{v}" for v in rng.integers(0, 1 << 40, n)], pa.large_string())
    names = pc.if_else(pa.array(rng.random(n) < 0.05), pa.scalar(None, pa.large_string()), names)
    return pa.table(
        [
            pa.array(ids, pa.int64()),
            pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, n), pa.timestamp("us", tz="UTC")),
            pa.array(rng.integers(0, 1000, n), pa.int32()),
            amount,
            names,
            pa.array([f"cat-{v}" for v in rng.integers(0, 50, n)], pa.large_string()),
            pa.array(rng.random(n) < 0.5),
            pa.array(rng.integers(19000, 20000, n).astype(np.int32), pa.date32()),
        ],
        schema=DATA,
    )


def change_rows(data: pa.Table, change_type: str | list[str], ordinal: int = 1) -> pa.Table:
    n = data.num_rows
    types = pa.array([change_type] * n if isinstance(change_type, str) else change_type, pa.string())
    extra = {
        "_change_type": types,
        "_change_ordinal": pa.array(np.full(n, ordinal, np.int32)),
        "_commit_snapshot_id": pa.array(np.full(n, ordinal, np.int64)),
        "_commit_timestamp": pa.array(np.zeros(n, np.int64), pa.timestamp("us", tz="UTC")),
    }
    for name, values in extra.items():
        data = data.append_column(name, values)
    return data


def csv_pieces(table: pa.Table) -> list[bytes]:
    out = []
    for start in range(0, table.num_rows, 65536):
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table.slice(start, 65536), sink, pacsv.WriteOptions(include_header=False))
        out.append(sink.getvalue().to_pybytes())
    return out


def copy_into(conn: Any, table: str, rows: pa.Table, columns: list[str]) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)") as copy:
        for piece in csv_pieces(rows):
            copy.write(piece)


def fresh_table(conn: Any, schema: str, preload: pa.Table | None) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TABLE {schema}.t {DDL}")
    for i, name in enumerate(COLUMNS):
        conn.execute(f"COMMENT ON COLUMN {schema}.t.{name} IS 'icetail:field-id={i + 1}'")
    if preload is not None:
        copy_into(conn, f"{schema}.t", preload, COLUMNS)
    conn.execute(f"VACUUM ANALYZE {schema}.t")


def mirror_apply(pg: str, schema: str, changes: pa.Table, chunk_rows: int) -> None:
    sink = PostgresMirrorSink(f"{pg}?table={schema}.t", consumer="bench")
    sink.bind(("id",), changes.schema)
    batch = uuid.uuid4().hex[:8]
    for index, start in enumerate(range(0, changes.num_rows, chunk_rows)):
        sink.write(ChunkKey("bench", batch, index, f"s{index}", 0), changes.slice(start, chunk_rows))
    sink.close()


def raw_copy(conn: Any, schema: str, rows: pa.Table) -> None:
    with conn.transaction():
        copy_into(conn, f"{schema}.t", rows, COLUMNS)


def copy_merge(conn: Any, schema: str, net: pa.Table) -> None:
    """The hand-written baseline: the net rows (with an op column) COPYed to staging, one MERGE."""
    others = [c for c in COLUMNS if c != "id"]
    with conn.transaction():
        conn.execute(f"CREATE TEMP TABLE stage ON COMMIT DROP AS SELECT * FROM {schema}.t WITH NO DATA")
        conn.execute("ALTER TABLE stage ADD COLUMN op text")
        copy_into(conn, "stage", net, [*COLUMNS, "op"])
        conn.execute(
            f"MERGE INTO {schema}.t t USING stage s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 'D' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{c} = s.{c}' for c in others)} "
            f"WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT ({', '.join(COLUMNS)}) "
            f"VALUES ({', '.join(f's.{c}' for c in COLUMNS)})"
        )


def timed(rounds: int, prepare: Callable[[], None], run: Callable[[], None]) -> list[float]:
    seconds = []
    for _ in range(rounds):
        prepare()
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return seconds


def report(label: str, rows: int, mine: list[float], base: list[float], base_label: str, goal: float | None) -> None:
    m, b = statistics.median(mine), statistics.median(base)
    print(
        f"{label}: mirror {m:.2f}s ({rows / m:,.0f} changes/s; min {min(mine):.2f} max {max(mine):.2f}), "
        f"{base_label} {b:.2f}s ({rows / b:,.0f} rows/s; min {min(base):.2f} max {max(base):.2f}); "
        f"ratio {b / m:.2f}x" + (f" (goal >= {goal}x)" if goal is not None else "")
    )


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg", default=PG)
    args = parser.parse_args()
    n, schema = args.rows, f"icetail_bench_{uuid.uuid4().hex[:8]}"
    conn = psycopg.connect(args.pg, autocommit=True)
    try:
        inserts = data_rows(np.arange(n), 1)
        insert_changes = change_rows(inserts, "INSERT")
        prepare_empty = lambda: fresh_table(conn, schema, None)  # noqa: E731
        mine = timed(args.rounds, prepare_empty, lambda: mirror_apply(args.pg, schema, insert_changes, args.chunk_rows))
        base = timed(args.rounds, prepare_empty, lambda: raw_copy(conn, schema, inserts))
        report(f"{n:,} inserts into an empty table", n, mine, base, "raw COPY", 0.7)

        # mixed: the table holds ids 0..n-1; 50% of n updates, 10% deletes, 40% inserts of new ids
        rng = np.random.default_rng(2)
        touched = rng.permutation(n)[: int(n * 0.6)]
        updated, deleted = touched[: n // 2], touched[n // 2 :]
        fresh = np.arange(n, n + int(n * 0.4))
        before, after = data_rows(updated, 3), data_rows(updated, 4)
        gone, new = data_rows(deleted, 1), data_rows(fresh, 5)
        pairs = pa.concat_tables([change_rows(before, "UPDATE_BEFORE"), change_rows(after, "UPDATE_AFTER")])
        mixed = pa.concat_tables([pairs, change_rows(gone, "DELETE"), change_rows(new, "INSERT")])
        changes = len(updated) + len(deleted) + len(fresh)
        net = pa.concat_tables(
            [
                after.append_column("op", pa.array(["U"] * len(updated))),
                gone.append_column("op", pa.array(["D"] * len(deleted))),
                new.append_column("op", pa.array(["I"] * len(fresh))),
            ]
        )
        prepare_loaded = lambda: fresh_table(conn, schema, inserts)  # noqa: E731
        mine = timed(args.rounds, prepare_loaded, lambda: mirror_apply(args.pg, schema, mixed, args.chunk_rows))
        base = timed(args.rounds, prepare_loaded, lambda: copy_merge(conn, schema, net))
        report(f"{changes:,} mixed changes ({mixed.num_rows:,} change rows)", changes, mine, base, "COPY + MERGE", 0.8)
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


if __name__ == "__main__":
    main()
