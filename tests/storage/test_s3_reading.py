"""Reading pyiceberg-written tables whose metadata and data live in S3 (moto_server on loopback).

The invariant checked, snapshot by snapshot: the rows of the previous snapshot (pyiceberg's own
scan) plus the change rows of (previous, next] (INSERTs added, DELETEs removed) are exactly the
rows of the next snapshot, as multisets of full rows. The table has appends of several
multi-row-group files, copy-on-write deletes, an overwrite and a schema change
(`tests.support.tables.build_mixed_table`). The executors read with the catalog's `s3.*`
FileIO properties, which travel in the ReadContext.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.api import read_changes
from tests.support.s3 import SECRET_ACCESS_KEY, S3Catalog
from tests.support.sinks import read_parquet_sink
from tests.support.tables import build_mixed_table

IDENT = "ns.mixed"


def _rows(table: pa.Table, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """Full rows counted; a column the table lacks (added later) counts as null."""
    return Counter(_ordered(table, columns))


def _apply(before: Counter[tuple[Any, ...]], changes: pa.Table, columns: list[str]) -> Counter[tuple[Any, ...]]:
    after = Counter(before)
    kinds = changes.column("_change_type").to_pylist()
    for kind, row in zip(kinds, _ordered(changes, columns), strict=True):
        if kind in ("INSERT", "UPDATE_AFTER"):
            after[row] += 1
        else:
            assert after[row] > 0, f"{kind} of a row that was not there: {row}"
            after[row] -= 1
    return +after


def _ordered(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    lists = [table.column(c).to_pylist() if c in table.column_names else [None] * table.num_rows for c in columns]
    return list(zip(*lists, strict=True))


@pytest.fixture
def mixed(s3_catalog: S3Catalog) -> Any:
    return build_mixed_table(s3_catalog, IDENT)  # type: ignore[arg-type]


def test_every_snapshot_step_is_exact(mixed: Any, spark: Any) -> None:
    table = mixed
    assert table.metadata_location.startswith("s3://")
    columns = [f.name for f in table.schema().fields]
    snapshots = [s.snapshot_id for s in table.snapshots()]
    assert len(snapshots) >= 10
    before: Counter[tuple[Any, ...]] = Counter()
    previous: int | None = None
    kinds_seen: set[str] = set()
    for snapshot_id in snapshots:
        changes = read_changes(table, previous, snapshot_id, spark=spark)
        kinds_seen.update(changes.column("_change_type").to_pylist())
        expected = _rows(table.scan(snapshot_id=snapshot_id).to_arrow(), columns)
        after = _apply(before, changes, columns)
        assert after == expected, f"snapshot {snapshot_id}: previous rows + changes != its rows"
        before, previous = expected, snapshot_id
    assert kinds_seen == {"INSERT", "DELETE"}


def test_whole_range_equals_current_rows(mixed: Any, spark: Any) -> None:
    columns = [f.name for f in mixed.schema().fields]
    changes = read_changes(mixed, spark=spark)
    assert _apply(Counter(), changes, columns) == _rows(mixed.scan().to_arrow(), columns)


def test_changes_and_run_clis_read_s3_exactly(mixed: Any, spark: Any, tmp_path: Path, capsys: Any) -> None:
    expected = read_changes(mixed, spark=spark)
    out = tmp_path / "changes.parquet"
    assert cli_main(["changes", "--catalog", "s3cat", "--table", IDENT, "--output", str(out)]) == 0
    got = pq.read_table(out)
    assert got.num_rows == expected.num_rows
    assert sorted(_ordered(got, got.column_names)) == sorted(_ordered(expected, got.column_names))

    sink = tmp_path / "sink"
    state = f"sqlite:///{tmp_path}/state.db"
    args = ["run", "--catalog", "s3cat", "--table", IDENT, "--state", state, "--sink", f"parquet://{sink}"]
    assert cli_main([*args, "--consumer", "c1", "--until-caught-up", "--chunk-rows", "97"]) == 0
    delivered = read_parquet_sink(sink)
    assert delivered is not None
    cols = [c for c in expected.column_names if c != "_change_ordinal"]
    assert Counter(_ordered(delivered, cols)) == Counter(_ordered(expected, cols))
    captured = capsys.readouterr()
    assert SECRET_ACCESS_KEY not in captured.out + captured.err
