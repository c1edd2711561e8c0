"""The data source's `with-row-lineage` option and lineage pairing, against Java's `_row_id` reads.

Java writes the v3 workload on the Spark 3.5 venv (tests/support/lineage_export.py); here the
batch and stream reads of the data source must pair every snapshot's updates by `_row_id`, with no
identifier columns, and deliver Java's `_row_id` / `_last_updated_sequence_number` values.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.spark4.support import comparable, load_df
from tests.spark4.test_stream_source import run_available_now, sink_rows
from tests.support.lineage_workload import (
    DATA,
    LINEAGE,
    RowsById,
    check_pairs_adjacent,
    check_snapshots,
    expected_changes,
    rows_by_id,
    tuples,
)

ROOT = Path(__file__).resolve().parents[2]
PYTHON35 = ROOT / ".venv" / "bin" / "python"


@dataclass(frozen=True)
class LineageExport:
    root: Path
    properties: dict[str, dict[str, str]]
    snapshots: list[tuple[int, int | None]]

    def options(self, catalog: str = "lineage", **extra: str) -> dict[str, str]:
        props = {f"catalog.{k}": v for k, v in self.properties[catalog].items()}
        return {"catalog": catalog, "table": "ns.t", **props, **extra}

    def rows_at(self, snapshot_id: int | None) -> RowsById:
        if snapshot_id is None:
            return {}
        return rows_by_id(pq.read_table(self.root / "reads" / f"{snapshot_id}.parquet"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> LineageExport:
    if not PYTHON35.exists():
        pytest.skip("the Spark 3.5 venv (.venv, `make .venv/.icetail-installed`) writes the Java workload")
    out = tmp_path_factory.mktemp("lineage")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
        env.pop(key, None)  # the 3.5 process starts its own Spark with its own interpreter
    command = [str(PYTHON35), "-m", "tests.support.lineage_export", str(out)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "workload.json").read_text())
    snapshots = [(s, p) for s, p in summary["snapshots"]]
    return LineageExport(out, {k: summary[k] for k in ("lineage", "nolineage")}, snapshots)


def test_batch_pairs_by_row_id_and_carries_java_lineage(registered: Any, exported: LineageExport) -> None:
    with_lineage = comparable(load_df(registered, exported.options(**{"with-row-lineage": "true"})))
    problems = check_snapshots(with_lineage, exported.snapshots, exported.rows_at)
    assert not problems, "\n".join(problems)
    plain = comparable(load_df(registered, exported.options()))
    assert plain.column_names == [c for c in with_lineage.column_names if c not in LINEAGE]
    assert sorted(tuples(plain, tuple(plain.column_names))) == sorted(
        tuples(with_lineage, tuple(plain.column_names))
    )


def test_net_batch_keyed_by_row_id_carries_java_lineage(registered: Any, exported: LineageExport) -> None:
    """option('net') with 'with-row-lineage': each row id's net change from the range's first to its last
    snapshot, as Java's `_row_id` reads of the two ends give it (docs/semantics.md, "Keyed by row lineage")."""
    first, last = exported.snapshots[1][0], exported.snapshots[-1][0]
    options = exported.options(**{"with-row-lineage": "true", "net": "true", "from-snapshot": str(first)})
    net = comparable(load_df(registered, options))
    got = Counter(zip(net.column("_change_type").to_pylist(), tuples(net, LINEAGE + DATA), strict=True))
    assert got == expected_changes(exported.rows_at(first), exported.rows_at(last))
    assert not check_pairs_adjacent(net) and "UPDATE_BEFORE" in net.column("_change_type").to_pylist()


def test_stream_pairs_by_row_id_and_carries_java_lineage(
    registered: Any, exported: LineageExport, tmp_path: Path
) -> None:
    options = exported.options(**{"with-row-lineage": "true", "starting": "earliest", "max-snapshots-per-trigger": "3"})
    run_available_now(registered, options, tmp_path)
    got = comparable(sink_rows(registered, tmp_path))
    # the sink's files come back in no set order: pairs are checked in the batch test
    problems = check_snapshots(got, exported.snapshots, exported.rows_at)
    problems = [p for p in problems if not p.startswith("row ")]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("catalog", "value", "message"),
    [
        ("nolineage", "true", "needs a format-version 3 table"),
        ("lineage", "maybe", "option 'with-row-lineage' must be true or false"),
    ],
)
def test_with_row_lineage_errors_name_the_problem(
    registered: Any, exported: LineageExport, catalog: str, value: str, message: str
) -> None:
    with pytest.raises(Exception) as raised:
        load_df(registered, exported.options(catalog, **{"with-row-lineage": value}))
    assert message in str(raised.value)
