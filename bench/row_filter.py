"""What a selective `--filter` saves: files pruned by column bounds, and the cost of the row filter.

    .venv/bin/python -m bench.row_filter [--files N] [--rows-per-file N] [--rounds N]

One append of N files with disjoint, ascending id ranges (as an append-only source writes them),
read whole with `read_changes` in one warm process, alternated with:

* `id < X` selecting the first file's rows: the other files are pruned by their id bounds
  (planned, never read);
* a filter as selective that no bound can prune (`k = 7` on a column spread over every file):
  every file is read and the filter is applied to each row.

Every one of `--rounds` rounds after one warm-up, their median, rows/s of the rows read and the
ratio to the unfiltered read are printed. The figures go to bench/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from icetail.monitor.engine.api import plan_range, read_changes
from icetail.reader.spark.session import spark_session


def build(root: Path, files: int, rows_per_file: int) -> object:
    catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("name", pa.string()), ("amount", pa.float64())])
    table = catalog.create_table("ns.t", schema=schema, properties={"write.target-file-size-bytes": str(1 << 40)})
    rng = np.random.default_rng(7)
    with table.transaction() as tx:
        for f in range(files):
            ids = np.arange(f * rows_per_file, (f + 1) * rows_per_file, dtype=np.int64)
            tx.append(
                pa.table(
                    {
                        "id": ids,
                        "k": rng.integers(0, 1000, len(ids), dtype=np.int32),
                        "name": pa.array([f"n{i % 977}" for i in range(len(ids))]),
                        "amount": rng.random(len(ids)),
                    },
                    schema=schema,
                )
            )
    return catalog.load_table("ns.t")


def timed(read: Callable[[], pa.Table], rounds: int) -> tuple[list[float], int]:
    """Every round's seconds after one warm-up, and the rows out."""
    read()  # warm-up
    seconds = []
    rows = 0
    for _ in range(rounds):
        start = time.perf_counter()
        rows = read().num_rows
        seconds.append(time.perf_counter() - start)
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="icetail-bench-filter-") as tmp:
        table = build(Path(tmp), args.files, args.rows_per_file)
        total = args.files * args.rows_per_file
        cases = {
            "no filter": None,
            f"id < {args.rows_per_file} (one file's ids)": f"id < {args.rows_per_file}",
            "k = 7 (no bound prunes it)": "k = 7",
        }
        base = None
        print(f"{args.files} files x {args.rows_per_file:,} rows = {total:,} rows; medians of {args.rounds} rounds")
        for label, expression in cases.items():
            pruned = plan_range(table, row_filter=expression).files_pruned

            def read(expression: str | None = expression) -> pa.Table:
                return read_changes(table, spark=spark, row_filter=expression)

            rounds, rows = timed(read, args.rounds)
            seconds = statistics.median(rounds)
            base = base or seconds
            read_rows = total * (args.files - pruned) / args.files
            print(
                f"{label:32} {rows:>10,} rows out  files pruned {pruned:>3}/{args.files}  median {seconds:6.3f} s  "
                f"{read_rows / seconds / 1e6:5.1f}M rows read/s  {base / seconds:5.2f}x the unfiltered read; "
                f"rounds {', '.join(f'{r:.3f}' for r in rounds)}"
            )


if __name__ == "__main__":
    main()
