"""The public API at the package root: what `import icetail` offers, by snapshot id and by time."""

from __future__ import annotations

import datetime
import inspect
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

import icetail
from tests.support.small_table import SmallTable


def test_public_names_are_exported() -> None:
    for name in icetail.__all__:
        assert hasattr(icetail, name), name
    assert issubclass(icetail.TerminalError, icetail.IcetailError)
    assert issubclass(icetail.TransientError, icetail.IcetailError)


def test_read_changes_takes_the_batch_readers_parameters_and_says_so() -> None:
    """`help(icetail.read_changes)` shows its own name, return type and docstring, and every parameter."""
    signature = inspect.signature(icetail.read_changes)
    assert signature.parameters == inspect.signature(icetail.changes_batch_reader).parameters
    assert {"from_tag", "net", "verify", "with_row_lineage"} <= set(signature.parameters)
    assert signature.return_annotation == "pa.Table"
    assert icetail.read_changes.__name__ == "read_changes"
    assert "as one Arrow table" in (icetail.read_changes.__doc__ or "")


def test_read_changes_by_snapshot_and_by_time_agree(small_table: SmallTable, spark: Any) -> None:
    table = icetail.load_table(small_table.name, "ns.t")
    first, second, third = (table.snapshot_by_id(s) for s in small_table.snapshot_ids)
    whole = icetail.read_changes(table)
    assert sorted(whole.column("_change_type").to_pylist()) == ["DELETE"] + ["INSERT"] * 5

    by_id = icetail.read_changes(table, first.snapshot_id, second.snapshot_id)
    at = datetime.datetime.fromtimestamp(first.timestamp_ms / 1000, tz=datetime.timezone.utc)
    by_time = icetail.read_changes(
        table, from_timestamp_exclusive=at, to_timestamp_inclusive=second.timestamp_ms
    )
    assert sorted(by_id.column("id").to_pylist()) == sorted(by_time.column("id").to_pylist()) == [4, 5]
    before_everything = icetail.read_changes(table, to_timestamp_inclusive=first.timestamp_ms - 1)
    assert before_everything.num_rows == 0 and before_everything.schema == whole.schema
    with pytest.raises(icetail.TerminalError, match=r"range is given twice \(a snapshot id and a timestamp\)"):
        icetail.read_changes(table, first.snapshot_id, from_timestamp_exclusive=at)

    with icetail.changes_batch_reader(table, from_snapshot_id_exclusive=second.snapshot_id) as reader:
        streamed = pa.Table.from_batches(list(reader), schema=reader.schema)
    assert streamed.column("_commit_snapshot_id").to_pylist() == [third.snapshot_id]


def test_version_and_module_entry_point() -> None:
    out = subprocess.run([sys.executable, "-m", "icetail", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"icetail {icetail.__version__}"
