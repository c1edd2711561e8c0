"""Driver-side cost of `reconcile_snapshot`: content carry-over only, identifier columns, row lineage.

One snapshot that rewrites N rows copy-on-write with 10% of them updated (N DELETEs, N INSERTs,
row ids kept). `python -m bench.reconcile_cost [N]`; figures in bench/RESULTS.md.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

from icetail.reader.changes.reconcile import reconcile_snapshot


def snapshot_changes(n: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    before = pa.array([f"v{i}" for i in range(n)])
    after = pa.array([f"v{i}u" if i % 10 == 0 else f"v{i}" for i in range(n)])

    def side(values: pa.Array, kind: str) -> pa.Table:
        return pa.table(
            {
                "id": ids,
                "v": values,
                "_row_id": ids,
                "_last_updated_sequence_number": np.ones(n, dtype=np.int64),
                "_change_type": pa.array([kind] * n),
                "_change_ordinal": pa.array(np.zeros(n, dtype=np.int32)),
                "_commit_snapshot_id": pa.array(np.full(n, 7, dtype=np.int64)),
                "_commit_timestamp": pa.array(np.zeros(n, dtype=np.int64)),
            }
        )

    return pa.concat_tables([side(before, "DELETE"), side(after, "INSERT")])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    changes = snapshot_changes(n)
    cases: tuple[tuple[str, dict[str, Any]], ...] = (
        ("content carry-over only", {}),
        ("identifier columns (id)", {"identifier_columns": ["id"]}),
        ("row lineage", {"row_lineage": True}),
    )
    for label, options in cases:
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            out = reconcile_snapshot(changes, **options)
            timings.append(time.perf_counter() - started)
        print(f"{label:26s} {changes.num_rows} rows in, {out.num_rows} out: best of 3 {min(timings):.2f} s")


if __name__ == "__main__":
    main()
