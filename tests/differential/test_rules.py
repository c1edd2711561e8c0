"""Focused differential tests, one Iceberg rule each, against the Java reader.

Each test first asserts what Java itself did (so a change in Java's write behaviour shows up as a
precondition failure, not as an icetail bug), then checks `icetail.monitor.engine.api.read_changes` with the oracle
over the whole history and snapshot by snapshot, plus explicit expectations for the rule.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.oracle import assert_changes_match, row_tuples
from tests.support.workloads import COW, MOR, table_properties

SINGLE_FILE = "/*+ REPARTITION(1) */"


def _create(catalog: Any, columns: str, format_version: int = 2, mode: str = MOR, partition: str = "") -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(format_version, mode).items())
    part = f" PARTITIONED BY ({partition})" if partition else ""
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t ({columns}) USING iceberg{part} TBLPROPERTIES ({props})")


def _insert_one_file(catalog: Any, values: str, names: str = "id, v") -> int:
    catalog.sql(f"INSERT INTO {{cat}}.ns.t SELECT {SINGLE_FILE} * FROM VALUES {values} AS s({names})")
    return catalog.current_snapshot_id("t")


def _summary(catalog: Any, snapshot_id: int) -> dict[str, str]:
    snap = catalog.load_table("t").snapshot_by_id(snapshot_id)
    return {"operation": snap.summary.operation.value, **snap.summary.additional_properties}


def _read(catalog: Any, from_id: int | None = None, to_id: int | None = None, **kwargs: Any) -> pa.Table:
    from icetail.monitor.engine.api import read_changes

    return read_changes(catalog.load_table("t"), from_id, to_id, **kwargs)


def _check_all(catalog: Any, *singles: int, **kwargs: Any) -> pa.Table:
    """Whole history, plus each snapshot in `singles` read on its own (from its parent).

    Every snapshot is checked from the whole-history output already; the single reads add the
    range boundaries. Returns the whole-history output.
    """
    problems: list[str] = []
    whole = _read(catalog, **kwargs)
    table = catalog.load_table("t")
    ranges: list[tuple[int | None, int | None]] = [(None, None)]
    ranges += [(table.snapshot_by_id(s).parent_snapshot_id, s) for s in singles]
    for from_id, to_id in ranges:
        out = whole if (from_id, to_id) == (None, None) else _read(catalog, from_id, to_id, **kwargs)
        try:
            assert_changes_match(
                out,
                catalog,
                "t",
                from_id,
                to_id,
                identifier_columns=kwargs.get("identifier_columns"),
                carry_over_removal=kwargs.get("carry_over_removal", True),
            )
        except AssertionError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)
    return whole


def _changes(out: pa.Table, snapshot_id: int, columns: tuple[str, ...] = ("id", "v")) -> Counter[tuple[Any, ...]]:
    keep = out.filter(pa.compute.equal(out.column("_commit_snapshot_id"), snapshot_id))
    return Counter(row_tuples(keep, [*columns, "_change_type"]))


# -- position deletes --------------------------------------------------------------------------


def test_v2_position_deletes(catalog) -> None:
    _create(catalog, "id bigint, v string")
    s1 = _insert_one_file(catalog, "(1L, 'a'), (2L, 'b'), (2L, 'b'), (3L, 'c'), (4L, NULL)")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    s2 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE v IS NULL")
    s3 = catalog.current_snapshot_id("t")
    assert _summary(catalog, s2)["added-position-deletes"] == "2"
    assert _summary(catalog, s2).get("added-data-files") is None

    out = _check_all(catalog, s2)
    assert _changes(out, s1)[(2, "b", "INSERT")] == 2
    assert _changes(out, s2) == Counter({(2, "b", "DELETE"): 2})
    assert _changes(out, s3) == Counter({(4, None, "DELETE"): 1})


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_delete_of_few_rows_reads_dictionary_text_as_indices_and_matches_java(catalog, format_version: int) -> None:
    """A DELETE of 10% (position deletes or DVs): the reader takes the low-cardinality text column as
    dictionary indices (split_reader._dictionary_columns) and keeps plain reads for the others; the
    rows, NULLs included, are Java's, read whole and in chunks that cut row groups."""
    from icetail.reader.split.read import _dictionary_columns

    _create(catalog, "id bigint, cat string, name string, tag string", format_version=format_version)
    catalog.sql(
        f"INSERT INTO {{cat}}.ns.t SELECT {SINGLE_FILE} id, concat('c', id % 3), concat('name-', id), "
        "CASE WHEN id % 4 = 0 THEN NULL ELSE concat('t', id % 2) END FROM range(3000)"
    )
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id % 10 = 7")
    s2 = catalog.current_snapshot_id("t")
    data_files = {f for f, _ in catalog.java_planned_files("t", s2)}
    assert len(data_files) == 1
    with catalog.load_table("t").io.new_input(next(iter(data_files))).open() as stream:
        parquet = pq.ParquetFile(stream)
        chosen = _dictionary_columns(
            parquet.metadata, list(range(parquet.num_row_groups)), ["id", "cat", "name", "tag"], parquet.schema_arrow
        )
    assert chosen == ["cat", "tag"], "the case this test is for: small dictionaries read as indices, not `name`"

    out = _check_all(catalog, s2)
    assert _changes(out, s2, ("cat",)) == Counter({("c0", "DELETE"): 100, ("c1", "DELETE"): 100, ("c2", "DELETE"): 100})
    parent = catalog.load_table("t").snapshot_by_id(s2).parent_snapshot_id
    whole = _read(catalog, parent, s2)
    assert whole.num_rows == 300
    from icetail.monitor.engine.api import iter_changes, plan_range
    from icetail.monitor.engine.range_bounds import RangeBounds

    table = catalog.load_table("t")
    chunked = pa.Table.from_batches(iter_changes(table, plan_range(table, RangeBounds(parent, s2)), chunk_rows=700))
    assert chunked.sort_by("id").equals(whole.sort_by("id"))


def test_v2_position_delete_file_is_rewritten_on_each_delete(catalog) -> None:
    """Spark 1.10 (file-scoped deletes): the 2nd DELETE's file repeats the 1st's positions, 1st removed."""
    _create(catalog, "id bigint, v string")
    _insert_one_file(catalog, "(1L, 'a'), (2L, 'b'), (3L, 'c'), (4L, 'd'), (5L, 'e')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 1")
    s2 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'cc' WHERE id = 3")
    s4 = catalog.current_snapshot_id("t")

    third = _summary(catalog, s3)
    assert third["removed-position-delete-files"] == "1", third
    assert third["added-position-deletes"] == "2", third  # positions 0 and 1: position 0 repeated
    assert _summary(catalog, s4)["removed-position-delete-files"] == "1"

    out = _check_all(catalog, s3, s4)
    assert _changes(out, s2) == Counter({(1, "a", "DELETE"): 1})
    assert _changes(out, s3) == Counter({(2, "b", "DELETE"): 1})
    assert _changes(out, s4) == Counter({(3, "c", "DELETE"): 1, (3, "cc", "INSERT"): 1})


def test_v3_deletion_vectors_replaced_per_data_file(catalog) -> None:
    """One Puffin file holds the DVs of two data files; later commits replace them one at a time."""
    _create(catalog, "id bigint, v string", format_version=3)
    _insert_one_file(catalog, "(1L, 'a'), (2L, 'b'), (3L, 'c')")
    _insert_one_file(catalog, "(11L, 'k'), (12L, 'l'), (13L, 'm')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id IN (1, 11)")
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")
    s4 = catalog.current_snapshot_id("t")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'll' WHERE id = 12")
    s5 = catalog.current_snapshot_id("t")

    assert _summary(catalog, s3)["added-dvs"] == "2"
    shared = {d for _, deletes in catalog.java_planned_files("t", s3) for d in deletes}
    assert len(shared) == 1, "Java wrote both DVs into one Puffin file"
    fourth = _summary(catalog, s4)
    assert (fourth["added-dvs"], fourth["removed-dvs"]) == ("1", "1"), fourth
    at_s4 = catalog.java_planned_files("t", s4)
    assert shared <= {d for _, deletes in at_s4 for d in deletes}, "the other file keeps its DV in the old Puffin"

    out = _check_all(catalog, s4)
    assert _changes(out, s3) == Counter({(1, "a", "DELETE"): 1, (11, "k", "DELETE"): 1})
    assert _changes(out, s4) == Counter({(2, "b", "DELETE"): 1})
    # v3 row lineage: the updated row keeps its _row_id, so the pair is an update without identifier columns
    assert _changes(out, s5) == Counter({(12, "l", "UPDATE_BEFORE"): 1, (12, "ll", "UPDATE_AFTER"): 1})


# -- equality deletes --------------------------------------------------------------------------


def test_equality_deletes_skip_data_files_of_the_same_sequence_number(catalog) -> None:
    _create(catalog, "id bigint, v string")
    _insert_one_file(catalog, "(1L, 'old'), (2L, 'old'), (3L, 'old')")
    data = catalog.write_data_file("t", "SELECT * FROM VALUES (1L, 'new'), (3L, 'new') AS s(id, v)")
    deletes = catalog.write_equality_deletes("t", "SELECT 1L AS id", commit=False)
    delta = catalog.java_table("t").newRowDelta().addRows(data)
    for d in deletes:
        delta = delta.addDeletes(d)
    delta.commit()
    s2 = catalog.current_snapshot_id("t")
    catalog.write_equality_deletes("t", "SELECT 1L AS id")
    s3 = catalog.current_snapshot_id("t")
    catalog.write_equality_deletes("t", "SELECT * FROM VALUES (3L, 'old') AS s(id, v)", columns=("id", "v"))
    s4 = catalog.current_snapshot_id("t")

    java_s2 = Counter(row_tuples(catalog.snapshot_rows("t", s2).table))
    assert java_s2 == Counter({(1, "new"): 1, (2, "old"): 1, (3, "old"): 1, (3, "new"): 1})

    out = _check_all(catalog, s2)
    assert _changes(out, s2) == Counter({(1, "old", "DELETE"): 1, (1, "new", "INSERT"): 1, (3, "new", "INSERT"): 1})
    assert _changes(out, s3) == Counter({(1, "new", "DELETE"): 1})
    assert _changes(out, s4) == Counter({(3, "old", "DELETE"): 1})


def test_equality_deletes_stay_in_their_partition(catalog) -> None:
    _create(catalog, "id bigint, p int, v string", partition="p")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (1L, 0, 'a'), (1L, 1, 'b'), (2L, 1, 'c')")
    files = catalog.write_equality_deletes("t", "SELECT 1L AS id", partitions=lambda path: path == "p=1")
    assert len(files) == 1  # an equality delete for id=1 in partition p=1 only
    s2 = catalog.current_snapshot_id("t")
    assert sorted(row_tuples(catalog.snapshot_rows("t", s2).table)) == [(1, 0, "a"), (2, 1, "c")]

    out = _check_all(catalog, s2)
    assert _changes(out, s2, ("id", "p", "v")) == Counter({(1, 1, "b", "DELETE"): 1})


# -- carry-over --------------------------------------------------------------------------------


def test_copy_on_write_carry_over_is_removed_as_a_multiset(catalog) -> None:
    _create(catalog, "id bigint, v string", mode=COW)
    _insert_one_file(catalog, "(1L, 'a'), (1L, 'a'), (2L, 'b'), (3L, 'a'), (3L, 'b')")
    catalog.sql("UPDATE {cat}.ns.t SET v = 'a' WHERE id = 3")
    s2 = catalog.current_snapshot_id("t")
    catalog.sql("UPDATE {cat}.ns.t SET v = v WHERE id = 1")
    s3 = catalog.current_snapshot_id("t")
    second = _summary(catalog, s2)
    assert (second["operation"], second["deleted-records"], second["added-records"]) == ("overwrite", "5", "5")

    out = _check_all(catalog, s2)
    assert _changes(out, s2) == Counter({(3, "b", "DELETE"): 1, (3, "a", "INSERT"): 1})
    assert _changes(out, s3) == Counter()

    raw = _check_all(catalog, carry_over_removal=False)
    assert _changes(raw, s2) == Counter({
        (1, "a", "DELETE"): 2, (2, "b", "DELETE"): 1, (3, "a", "DELETE"): 1, (3, "b", "DELETE"): 1,
        (1, "a", "INSERT"): 2, (2, "b", "INSERT"): 1, (3, "a", "INSERT"): 2,
    })
    assert sum(_changes(raw, s3).values()) == 10  # the whole file, rewritten unchanged


@pytest.mark.parametrize("mode", [MOR, COW])
def test_no_op_update_emits_nothing(catalog, mode) -> None:
    _create(catalog, "id bigint, v string", mode=mode)
    _insert_one_file(catalog, "(1L, 'a'), (1L, 'a'), (2L, 'b')")
    catalog.sql("UPDATE {cat}.ns.t SET v = v WHERE id = 1")
    s2 = catalog.current_snapshot_id("t")
    out = _check_all(catalog, s2)
    assert _changes(out, s2) == Counter()


# -- replace and empty snapshots ---------------------------------------------------------------


def test_replace_snapshots_emit_nothing_and_take_no_ordinal(catalog) -> None:
    _create(catalog, "id bigint, v string")
    _insert_one_file(catalog, "(1L, 'a'), (2L, 'b')")
    _insert_one_file(catalog, "(3L, 'c'), (4L, 'd')")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id IN (1, 3)")  # position deletes in both files
    catalog.sql(
        "CALL {cat}.system.rewrite_position_delete_files(table => 'ns.t', options => map('rewrite-all', 'true'))"
    )
    catalog.sql("CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 999")  # matches nothing
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (5L, 'e')")
    ids = catalog.snapshot_ids("t")
    ops = [_summary(catalog, i)["operation"] for i in ids]
    assert ops == ["append", "append", "delete", "replace", "replace", "delete", "append"], ops
    assert _summary(catalog, ids[5]).get("deleted-records") is None  # the empty delete snapshot

    out = _check_all(catalog)
    assert not set(out.column("_commit_snapshot_id").to_pylist()) & {ids[3], ids[4]}
    last = out.filter(pa.compute.equal(out.column("_commit_snapshot_id"), ids[-1]))
    non_replace_before_last = len([o for o in ops[:-1] if o != "replace"])
    assert set(last.column("_change_ordinal").to_pylist()) == {non_replace_before_last}
    assert _read(catalog, ids[2], ids[4]).num_rows == 0
    assert _read(catalog, ids[4], ids[5]).num_rows == 0


# -- schema evolution --------------------------------------------------------------------------


def test_schema_evolution_projects_by_field_id(catalog) -> None:
    _create(catalog, "id bigint, n int, f float, v string, x string")
    _insert_one_file(
        catalog, "(1L, 10, CAST(1.5 AS FLOAT), 'a', 'x1'), (2L, 20, CAST(-0.25 AS FLOAT), 'b', 'x2')", "id, n, f, v, x"
    )
    s1 = catalog.current_snapshot_id("t")
    for stmt in (
        "ALTER TABLE {cat}.ns.t ADD COLUMN e bigint",
        "ALTER TABLE {cat}.ns.t RENAME COLUMN v TO w",
        "ALTER TABLE {cat}.ns.t DROP COLUMN x",
        "ALTER TABLE {cat}.ns.t ALTER COLUMN n TYPE bigint",
        "ALTER TABLE {cat}.ns.t ALTER COLUMN f TYPE double",
    ):
        catalog.sql(stmt)
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (3L, 3000000000L, 0.1D, 'c', 7L)")
    catalog.sql("UPDATE {cat}.ns.t SET w = 'aa' WHERE id = 1")
    s3 = catalog.current_snapshot_id("t")
    catalog.sql("DELETE FROM {cat}.ns.t WHERE id = 2")

    out = _check_all(catalog, s3)
    data_cols = [c for c in out.column_names if not c.startswith("_")]
    assert data_cols == ["id", "n", "f", "w", "e"]
    assert out.schema.field("n").type == pa.int64()
    assert out.schema.field("f").type == pa.float64()
    assert _changes(out, s1, ("id", "n", "f", "w", "e")) == Counter({
        (1, 10, 1.5, "a", None, "INSERT"): 1, (2, 20, -0.25, "b", None, "INSERT"): 1,
    })
    assert _changes(out, s3, ("id", "w", "e")) == Counter({(1, "a", None, "DELETE"): 1, (1, "aa", None, "INSERT"): 1})

    old = _read(catalog, None, s1)
    assert [c for c in old.column_names if not c.startswith("_")] == ["id", "n", "f", "v", "x"]
    assert old.schema.field("n").type == pa.int32()
    assert old.schema.field("f").type == pa.float32()
