"""option('verify', off|warn|strict) of the data source on a table whose summary lies.

The liar: four appends of four rows each (S1..S4); S3's summary claims 5 added records (its
metadata file rewritten, tests/support/summaries.py), so the task reading S3 counts 4 INSERTs
against 5. The check runs in that task: under strict the task, and with it the query, fails
with the SnapshotCheckError line; under warn and off the rows are those of `icetail.read_changes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icetail
from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.api import plan_range
from icetail.monitor.engine.spark_source.partitions import VERIFY_SETTING, plan_partitions, read_partition
from icetail.monitor.engine.verify import SnapshotCheckError, VerifyMode, rules_of_plan, strict_error
from icetail.reader.changes.checks import Mismatch
from tests.spark4.support import load_df, row_counter
from tests.spark4.test_stream_source import run_available_now, sink_rows
from tests.support.source_table import SCHEMA, SourceTable, new_source_table
from tests.support.summaries import doctor_summary


@pytest.fixture
def liar(tmp_path: Path) -> SourceTable:
    table = new_source_table(tmp_path / "liar")
    for _ in range(4):
        table.commit("append")
    lying = table.snapshot_ids[2]
    assert table.load().snapshot_by_id(lying).summary["added-records"] == "4"  # type: ignore[union-attr]
    doctor_summary(table.load(), lying, added_records="5")
    return table


def _refusal(liar: SourceTable) -> str:
    """The one line a strict read of the liar fails with."""
    return str(strict_error(Mismatch(liar.snapshot_ids[2], "added-records", 5, 4), VERIFY_SETTING))


def _honest_rows(liar: SourceTable, spark: Any) -> pa.Table:
    return icetail.read_changes(liar.load(), verify="off", spark=spark)


def test_strict_batch_read_fails_with_the_check_line(registered: Any, liar: SourceTable) -> None:
    with pytest.raises(Exception) as raised:
        load_df(registered, liar.options(verify="strict"))
    assert "SnapshotCheckError" in str(raised.value)
    assert _refusal(liar) in str(raised.value)
    assert "refused under option 'verify' strict" in _refusal(liar)


def test_warn_and_off_return_the_rows_as_read(registered: Any, liar: SourceTable) -> None:
    expected = row_counter(_honest_rows(liar, registered))
    assert sum(expected.values()) == 16
    for verify in ("warn", "off", None):  # None: the default, warn
        options = liar.options(verify=verify) if verify else liar.options()
        assert row_counter(load_df(registered, options)) == expected, verify


def test_strict_read_of_a_range_without_the_liar_returns_its_rows(registered: Any, liar: SourceTable) -> None:
    ids = liar.snapshot_ids
    got = load_df(registered, liar.options(verify="strict", to_snapshot=ids[1]))
    expected = icetail.read_changes(liar.load(), None, ids[1], spark=registered)
    assert got.num_rows == 8 and row_counter(got) == row_counter(expected)


def test_bad_verify_value_is_refused_with_one_line(registered: Any, liar: SourceTable) -> None:
    with pytest.raises(Exception) as raised:
        load_df(registered, liar.options(verify="loud"))
    assert "option 'verify' 'loud' is not one of off, warn, strict" in str(raised.value)


def test_honest_table_under_strict_equals_icetail_changes(
    registered: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every snapshot kind of the source table passes its checks: strict returns what `icetail changes` does."""
    honest = new_source_table(tmp_path / "honest", name="honest")
    for action in ("append", "append", "delete", "upsert", "append", "overwrite", "delete"):
        honest.commit(action)
    plan = plan_range(honest.load())
    checked = rules_of_plan(honest.load().metadata, plan.splits, from_snapshot_exclusive=None, collapsed=plan.collapsed)
    assert len([r for r in checked.values() if r.rules]) == len(
        honest.snapshot_ids
    )  # every snapshot has a rule: the strict read checks them all

    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    for key, value in honest.properties.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__HONEST__{key.upper()}", value)
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())
    output = tmp_path / "changes.parquet"
    command = ["changes", "--catalog", "honest", "--table", "ns.t", "--verify", "strict", "--output", str(output)]
    assert cli_main(command) == 0
    expected = pq.read_table(output)
    got = load_df(registered, honest.options(verify="strict"))
    assert got.num_rows == expected.num_rows > 0
    assert row_counter(got) == row_counter(expected)


def test_strict_stream_fails_on_the_lying_snapshot(registered: Any, liar: SourceTable, tmp_path: Path) -> None:
    """One snapshot per micro-batch: S1 and S2 are committed to the sink, S3's batch fails the query."""
    options = liar.options(verify="strict", starting="earliest", max_snapshots_per_trigger=1)
    query = (
        registered.readStream.format("icetail")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        with pytest.raises(Exception) as raised:
            query.awaitTermination(300)  # a query that does not fail is stopped, not waited on forever
    finally:
        query.stop()
    assert _refusal(liar) in str(raised.value)
    committed = registered.read.parquet(str(tmp_path / "sink")).toArrow()
    assert row_counter(committed) == row_counter(icetail.read_changes(liar.load(), None, liar.snapshot_ids[1]))

    # the failed batch was not committed: a restart under warn delivers it and the rest, exactly once
    run_available_now(registered, {**options, "verify": "warn"}, tmp_path)
    assert row_counter(sink_rows(registered, tmp_path)) == row_counter(_honest_rows(liar, registered))


def test_a_checked_snapshot_is_never_cut_across_packed_partitions(tmp_path: Path) -> None:
    """A lying snapshot of two data files, packed with one byte per partition: with verify its two splits
    share one partition (which refuses it under strict); with verify off they are cut apart."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    source = new_source_table(tmp_path / "two")
    source.commit("append")
    table = source.load()
    files = []
    for start in (100, 200):
        rows = pa.Table.from_pylist([{"id": start + i, "v": "x", "n": 0.0} for i in range(3)], SCHEMA)
        files += list(_dataframe_to_data_files(table.metadata, rows, table.io))
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    table = source.load()
    two_files = table.metadata.current_snapshot_id
    assert two_files is not None
    doctor_summary(table, two_files, added_records="7")
    table = source.load()
    plan = plan_range(table)

    def splits_per_partition(verify: VerifyMode) -> list[int]:
        specs = plan_partitions(table, plan, partition_bytes=1, verify=verify)
        return [sum(s.task.commit.snapshot_id == two_files for s in spec.splits) for spec in specs]

    assert splits_per_partition(VerifyMode.OFF) == [0, 1, 1]
    assert splits_per_partition(VerifyMode.STRICT) == [0, 2]
    specs = plan_partitions(table, plan, partition_bytes=1, verify=VerifyMode.STRICT)
    assert [spec.checks[0].snapshot_id for spec in specs] == [source.snapshot_ids[0], two_files]
    assert sum(b.num_rows for b in read_partition(specs[0])) == 4
    with pytest.raises(SnapshotCheckError) as raised:
        list(read_partition(specs[1]))
    assert str(raised.value) == str(strict_error(Mismatch(two_files, "added-records", 7, 6), VERIFY_SETTING))
    warned = plan_partitions(table, plan, partition_bytes=1, verify=VerifyMode.WARN)
    assert sum(b.num_rows for spec in warned for b in read_partition(spec)) == 10
