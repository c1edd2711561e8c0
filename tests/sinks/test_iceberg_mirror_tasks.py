"""The Iceberg mirror's file rewrites in Spark tasks against the driver's: the same commit (rows,
files, counts) for a group spread over many files, the same one-line error for a data file gone,
the rule that picks the place, and a transform other than the mirror's plugged into both runners.
Real Spark (local), a real pyiceberg SQL catalog on SQLite."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from icetail.kernel.errors import ConfigError, SinkError, SinkRejectedError
from icetail.sinks.iceberg.mirror.files import AffectedKeys, FileChange, GroupFiles, matches, rewrite_in_driver
from icetail.sinks.iceberg.mirror.sink import IcebergMirrorSink
from icetail.sinks.iceberg.mirror.tasks import (
    DEFAULT_TASK_BYTES,
    TASK_BYTES_PROPERTY,
    balanced_groups,
    in_tasks,
    rewrite_in_tasks,
    task_bytes,
)
from tests.sinks import CATALOG
from tests.sinks.test_iceberg_mirror import SCHEMA, _key, _rows

FILES = 12
FILE_ROWS = 40


def _sink(name: str, spark: Any, threshold: int | None) -> IcebergMirrorSink:
    """A mirror into tgt.NAME holding FILES files of FILE_ROWS keys each (one group each), with the
    target's task threshold set (None: the default)."""
    sink = IcebergMirrorSink(CATALOG, f"tgt.{name}", consumer="c1")
    sink.use_spark(lambda: spark)
    sink.bind(("id",), SCHEMA)
    for f in range(FILES):
        sink.write_group([(_key("b1", f), _rows([("INSERT", f * 100 + j, f"a{j}", 1) for j in range(FILE_ROWS)]))])
    if threshold is not None:
        with sink.catalog.load_table(f"tgt.{name}").transaction() as tx:
            tx.set_properties({TASK_BYTES_PROPERTY: str(threshold)})
    sink.close()
    again = IcebergMirrorSink(CATALOG, f"tgt.{name}", consumer="c1")
    again.use_spark(lambda: spark)
    again.bind(("id",), SCHEMA)
    return again


def _spread_group() -> pa.Table:
    """Updates, deletes, a key change and inserts of keys held already, over every file; fresh keys."""
    changes: list[tuple[str, int, str | None, int]] = []
    for f in range(FILES):
        changes += [("UPDATE_BEFORE", f * 100 + 1, "a1", 2), ("UPDATE_AFTER", f * 100 + 1, f"u{f}", 2)]
        changes += [("DELETE", f * 100 + 2, "a2", 2)]
    changes += [("UPDATE_BEFORE", 303, "a3", 3), ("UPDATE_AFTER", 5_000, "moved", 3)]
    changes += [("INSERT", 704, "dup", 3), ("INSERT", 905, "dup", 3)]  # the target holds these keys: last wins
    changes += [("INSERT", 10_000 + j, "new", 3) for j in range(30)]
    changes += [("DELETE", f * 100 + j, "a", 4) for f in (0, 5) for j in range(FILE_ROWS)]  # whole files emptied
    return _rows(changes)


def _rows_of(table: Table) -> list[tuple[Any, ...]]:
    got = table.scan().to_arrow()
    return sorted(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True))


def test_a_group_over_many_files_commits_the_same_in_tasks_and_in_the_driver(
    sql_catalog: SqlCatalog, spark: Any
) -> None:
    in_driver, in_spark = _sink("d", spark, -1), _sink("t", spark, 0)
    group = [(_key("b2", 0), _spread_group())]
    in_driver.write_group(group)
    in_spark.write_group(group)
    d, t = in_driver.last, in_spark.last
    assert d is not None and t is not None
    assert d.spark_tasks == 0 and t.spark_tasks == 4, "12 files in 2 cores x 2 tasks"
    assert t.files_read == d.files_read == FILES and len(t.replaced) == len(d.replaced) == FILES
    assert (t.rows_deleted, t.rows_upserted, t.duplicates) == (d.rows_deleted, d.rows_upserted, d.duplicates)
    assert (d.rows_deleted, d.duplicates) == (2 * FILES + 1 + 2 + 2 * FILE_ROWS - 4, 2)

    def kept(rewrite: Any) -> list[tuple[int, int]]:
        """(rows of the file replaced, rows of its rewrite) per replaced file."""
        return sorted((old.record_count, sum(f.record_count for f in new)) for old, new in rewrite.replaced)

    assert kept(t) == kept(d) and len(kept(t)) == FILES
    assert sum(n == 0 for _, n in kept(t)) == 2, "an emptied file is replaced by nothing"
    target_d, target_t = sql_catalog.load_table("tgt.d"), sql_catalog.load_table("tgt.t")
    expected: dict[int, str] = {f * 100 + j: f"a{j}" for f in range(FILES) for j in range(FILE_ROWS)}
    for f in range(FILES):
        expected[f * 100 + 1] = f"u{f}"
        del expected[f * 100 + 2]
    del expected[303]
    expected |= {5_000: "moved", 704: "dup", 905: "dup"} | {10_000 + j: "new" for j in range(30)}
    for f in (0, 5):
        for j in range(FILE_ROWS):
            expected.pop(f * 100 + j, None)
    assert _rows_of(target_t) == _rows_of(target_d) == sorted(expected.items())
    summary = ("added-data-files", "deleted-data-files", "added-records", "deleted-records", "total-records")
    snap_d, snap_t = target_d.current_snapshot(), target_t.current_snapshot()
    assert snap_d is not None and snap_t is not None
    assert {k: snap_t.summary[k] for k in summary} == {k: snap_d.summary[k] for k in summary}  # type: ignore[index]


def _remove_a_data_file(table: Table, holding: int) -> str:
    """Delete (on disk) the data file that holds key `holding`; its path."""
    for task in table.scan().plan_files():
        low, high = (
            int.from_bytes(b[1], "little", signed=True) for b in (task.file.lower_bounds, task.file.upper_bounds)
        )
        if low <= holding <= high:
            os.remove(urlparse(task.file.file_path).path)
            return str(task.file.file_path)
    raise AssertionError(f"no file holds {holding}")


def test_a_missing_data_file_fails_the_group_in_one_line_alike_in_tasks_and_in_the_driver(
    sql_catalog: SqlCatalog, spark: Any
) -> None:
    messages = []
    for name, threshold in (("d", -1), ("t", 0)):
        sink = _sink(name, spark, threshold)
        table = sql_catalog.load_table(f"tgt.{name}")
        gone = _remove_a_data_file(table, 705)
        snapshots = len(table.snapshots())
        group = _rows([("DELETE", 105, "a5", 2), ("UPDATE_BEFORE", 705, "a5", 2), ("UPDATE_AFTER", 705, "x", 2)])
        with pytest.raises(SinkError) as info:
            sink.write_group([(_key("b2", 0), group)])
        assert not isinstance(info.value, SinkRejectedError), "a retry can heal a file restored: transient"
        message = str(info.value)
        assert "\n" not in message and gone.rsplit("/", 1)[-1] in message, message
        assert len(sql_catalog.load_table(f"tgt.{name}").snapshots()) == snapshots, "nothing committed"
        directory, name = urlparse(gone).path.rsplit("/", 1)
        messages.append(message.replace(name, "GONE").replace(directory, "DIR").replace("tgt.t", "tgt.d"))
    assert messages[0] == messages[1]


def test_the_rule_puts_small_groups_in_the_driver(sql_catalog: SqlCatalog, spark: Any) -> None:
    sink = _sink("r", spark, None)  # the default threshold: 12 small files are far below it
    sink.write_group([(_key("b2", 0), _spread_group())])
    assert sink.last is not None and sink.last.files_read == FILES and sink.last.spark_tasks == 0
    files = list(sql_catalog.load_table("tgt.r").scan().plan_files())
    size = sum(t.file.file_size_in_bytes for t in files)
    assert in_tasks(files, size) and not in_tasks(files, size + 1) and not in_tasks(files, -1)
    assert not in_tasks([], 0)
    assert task_bytes({}) == DEFAULT_TASK_BYTES and task_bytes({TASK_BYTES_PROPERTY: "0"}) == 0
    with pytest.raises(ConfigError, match=f"{TASK_BYTES_PROPERTY}='8MB' must be a number of bytes"):
        task_bytes({TASK_BYTES_PROPERTY: "8MB"})


def test_files_are_balanced_over_the_tasks_by_bytes() -> None:
    groups = balanced_groups([100, 1, 1, 50, 50, 1], 3)
    assert sorted(sum(([100, 1, 1, 50, 50, 1][i] for i in g), 0) for g in groups) == [51, 52, 100]
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert balanced_groups([5, 5], 8) == [[0], [1]] and balanced_groups([], 4) == []


@dataclass(frozen=True)
class MarkAffected:
    """Another per-file transform, as a history mode plugs in: the affected rows kept, marked."""

    mark: str

    def __call__(self, rows: pa.Table, affected: AffectedKeys) -> FileChange:
        hit = pa.array(matches(rows, affected.keys, affected.key))
        found = int(pc.sum(hit).as_py() or 0)
        marked = rows.set_column(rows.schema.get_field_index("v"), "v", pc.if_else(hit, self.mark, rows["v"]))
        return FileChange(marked, found, 0)


def test_another_transform_runs_alike_in_tasks_and_in_the_driver(sql_catalog: SqlCatalog, spark: Any) -> None:
    sink = _sink("x", spark, None)
    table = sql_catalog.load_table("tgt.x")
    files = list(table.scan().plan_files())
    keys = pa.table({"id": pa.array([101, 102, 707, 5_555], pa.int64())})
    affected = AffectedKeys(("id",), keys, pa.array([False, False, False, True]))
    group = GroupFiles(table.metadata, table.io, files, affected, MarkAffected("closed"))
    done = {
        "driver": rewrite_in_driver(group),
        "tasks": rewrite_in_tasks(spark, group),
    }
    assert done["driver"][1] == 0 and done["tasks"][1] == 4
    for outcomes, _ in done.values():
        assert [o.old.file_path for o in outcomes] == [t.file.file_path for t in files]
        assert sum(o.new is not None for o in outcomes) == 2 and sum(o.affected for o in outcomes) == 3
        rewritten = pa.concat_tables(
            [pq.read_table(urlparse(f.file_path).path) for o in outcomes for f in (o.new or ())]
        )
        marked = sorted(rewritten.filter(pc.equal(rewritten["v"], "closed"))["id"].to_pylist())
        assert marked == [101, 102, 707] and rewritten.num_rows == 2 * FILE_ROWS
    sink.close()
