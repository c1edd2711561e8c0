"""Split planning, lineage and manifest-list reading on pure values, pyiceberg tables and Java-written ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table.snapshots import Operation, Summary

from icetail.kernel.model import ChangeTask, CommitInfo, DataFileRef, FileChangeKind
from icetail.monitor.planning.lineage import snapshot_by_id, snapshots_between
from icetail.monitor.planning.manifests import ManifestReader, changed_file_counts
from icetail.monitor.planning.planner import Planner, split_task
from tests.support.small_table import SCHEMA, SmallTable
from tests.support.workloads import COW, MIXED, Workload

COMMIT = CommitInfo(1, None, "append", 0, 1, 0)


def _task(size: int, offsets: tuple[int, ...] | None) -> ChangeTask:
    data_file = DataFileRef("f.parquet", "PARQUET", 1000, size, 0, "()", 1, offsets)
    return ChangeTask(data_file, FileChangeKind.ADDED, COMMIT)


def test_splits_follow_row_groups_and_cover_the_file() -> None:
    splits = split_task(_task(1000, (4, 200, 400, 600, 800)), target_split_bytes=450)
    assert [(s.row_group_start, s.row_group_end) for s in splits] == [(0, 2), (2, 4), (4, 5)]
    assert len({s.split_id for s in splits}) == 3


def test_small_or_unknown_layout_is_one_split() -> None:
    assert len(split_task(_task(100, (4, 50)), 1000)) == 1
    assert [(s.row_group_start, s.row_group_end) for s in split_task(_task(10_000, None), 100)] == [(0, None)]


def test_one_huge_row_group_still_gets_its_own_split() -> None:
    splits = split_task(_task(10_000, (4, 9000)), 100)
    assert [(s.row_group_start, s.row_group_end) for s in splits] == [(0, 1), (1, 2)]


def test_planning_reads_only_new_manifests_with_a_warm_cache(small_table: SmallTable) -> None:
    table = small_table.load()
    planner = Planner(table)
    planner.plan(None, None)
    table.append(pa.table({"id": [9], "v": ["z"]}, SCHEMA))
    table = small_table.load()
    planner.refresh(table)
    plan = planner.plan(small_table.snapshot_ids[-1], None)
    assert [c.operation for c in plan.commits] == ["append"]
    assert plan.manifests_read == 1  # only the manifest the new snapshot wrote
    assert [t.kind for t in plan.tasks] == [FileChangeKind.ADDED]


def test_full_plan_reads_live_files(small_table: SmallTable) -> None:
    plan = Planner(small_table.load()).plan_full()
    assert {t.kind for t in plan.tasks} == {FileChangeKind.ADDED}
    assert sum(t.data_file.record_count for t in plan.tasks) == 4


# -- snapshot lookups and the manifest-list early stop -----------------------------------------


def test_snapshot_index_agrees_with_pyiceberg_and_follows_refreshed_metadata(small_table: SmallTable) -> None:
    table = small_table.load()
    for snapshot in table.metadata.snapshots:
        assert snapshot_by_id(table.metadata, snapshot.snapshot_id) is table.metadata.snapshot_by_id(
            snapshot.snapshot_id
        )
    assert snapshot_by_id(table.metadata, -1) is None
    old = table.metadata
    table.append(pa.table({"id": [9], "v": ["z"]}, SCHEMA))  # gives `table` new metadata
    fresh = small_table.load()
    new_id = fresh.metadata.current_snapshot_id
    assert new_id is not None
    assert snapshot_by_id(old, new_id) is None  # the old metadata object keeps its own view
    assert snapshot_by_id(table.metadata, new_id) is table.metadata.snapshot_by_id(new_id)
    assert snapshot_by_id(fresh.metadata, new_id) is fresh.metadata.snapshot_by_id(new_id)
    assert snapshots_between(fresh.metadata, None, new_id)[-1].snapshot_id == new_id


def _compare_early_stop(table: Any) -> dict[int, tuple[int, int]]:
    """Plans and own manifests of every snapshot, with and without the early stop.

    Returns {snapshot id: (manifest-list entries decoded with the early stop, entries in the list)}.
    """
    decoded: dict[int, tuple[int, int]] = {}
    for snapshot in table.metadata.snapshots:
        sid, parent = snapshot.snapshot_id, snapshot.parent_snapshot_id
        # the same plan; manifests_read may differ: a manifest decoded up to its commit's own
        # entries is decoded again, whole, when the diff needs its live files (a row-level commit)
        early_plan, whole_plan = Planner(table).plan(parent, sid), Planner(table, early_stop=False).plan(parent, sid)
        assert replace(early_plan, manifests_read=0) == replace(whole_plan, manifests_read=0), sid
        early, whole = ManifestReader(table.io), ManifestReader(table.io, early_stop=False)
        own = [m.manifest_path for m in early.own_manifests(snapshot)]
        decoded[sid] = (early.list_entries_read, len(whole.manifest_list(snapshot)))
        assert own == [m.manifest_path for m in whole.own_manifests(snapshot)], sid
        assert own == [m.manifest_path for m in snapshot.manifests(table.io) if m.added_snapshot_id == sid], sid
        assert sorted(e.file.path for e in early.added_in(snapshot)) == sorted(
            e.file.path for e in whole.added_in(snapshot)
        ), sid
    early_plan, whole_plan = Planner(table).plan(None, None), Planner(table, early_stop=False).plan(None, None)
    assert replace(early_plan, manifests_read=0) == replace(whole_plan, manifests_read=0)
    return decoded


def test_early_stop_matches_full_read_on_pyiceberg_commits(small_table: SmallTable) -> None:
    decoded = _compare_early_stop(small_table.load())
    # pyiceberg writes a commit's new manifests first: its appends stop at the first entry
    append_id = small_table.snapshot_ids[1]
    assert decoded[append_id][0] == 1 < decoded[append_id][1]


def _fast_append_history(
    catalog: Any, name: str, snapshots: int, files_per_snapshot: int = 2, merge_every: int | None = None
) -> None:
    """`snapshots` Java fast appends of fake data files: the manifest list of snapshot N holds N manifests.

    `merge_every`: merging appends instead (`newAppend`, `commit.manifest.min-count-to-merge`).
    """
    props = "'format-version'='2'"
    if merge_every is not None:
        props += f", 'commit.manifest.min-count-to-merge'='{merge_every}'"
    catalog.sql(f"CREATE TABLE {{cat}}.ns.{name} (id bigint) USING iceberg TBLPROPERTIES ({props})")
    jvm = catalog.spark._jvm
    jtable = catalog.java_table(name)
    location = catalog.load_table(name).location()
    for s in range(snapshots):
        append = jtable.newFastAppend() if merge_every is None else jtable.newAppend()
        for j in range(files_per_snapshot):
            append.appendFile(
                jvm.org.apache.iceberg.DataFiles.builder(jtable.spec())
                .withPath(f"{location}/data/h{s:04d}-{j}.parquet")
                .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
                .withFileSizeInBytes(1000)
                .withRecordCount(10)
                .build()
            )
        append.commit()


def test_early_stop_reads_one_entry_of_a_long_java_fast_append_history(catalog: Any) -> None:
    _fast_append_history(catalog, "h", 40)
    table = catalog.load_table("h")
    decoded = _compare_early_stop(table)
    current = table.current_snapshot()
    assert decoded[current.snapshot_id] == (1, 40)  # the new manifest comes first in Java's list
    assert all(early == 1 for early, _ in decoded.values())
    # the partly read list is not cached as if whole; its result is, for the next plan
    reader = ManifestReader(table.io)
    assert len(reader.own_manifests(current)) == 1 and reader.list_entries_read == 1
    assert len(reader.own_manifests(current)) == 1 and reader.list_entries_read == 1
    assert len(reader.manifest_list(current)) == 40 and reader.list_entries_read == 41


def test_a_merged_manifest_is_decoded_only_up_to_its_commits_own_entries(catalog: Any) -> None:
    """A merge commit's manifest carries every older file as EXISTING after its own ADDED ones:
    planning that commit decodes its own entries, not the files carried over (issue 24 §2)."""
    _fast_append_history(catalog, "m", 12, files_per_snapshot=3, merge_every=4)
    table = catalog.load_table("m")
    _compare_early_stop(table)  # the same plans and added_in, with and without the stops
    merges = []
    for snapshot in table.metadata.snapshots:
        own = [m for m in snapshot.manifests(table.io) if m.added_snapshot_id == snapshot.snapshot_id]
        if any(m.existing_files_count for m in own):
            merges.append((snapshot, sum(m.added_files_count + m.existing_files_count for m in own)))
    assert merges, "no merge commit: Java's merge settings changed?"
    for snapshot, entries in merges:
        early, whole = ManifestReader(table.io), ManifestReader(table.io, early_stop=False)
        assert [e.file.path for e in early.added_in(snapshot)] == [e.file.path for e in whole.added_in(snapshot)]
        assert early.entries_decoded == 3 < entries == whole.entries_decoded
        # the full entries, once read, serve the changes too; the partial read is not taken for them
        assert sum(len(early.entries(m)) for m in early.own_manifests(snapshot)) == entries
        assert early.entries_decoded == 3 + entries


def test_early_stop_falls_back_to_the_whole_list(catalog: Any) -> None:
    _fast_append_history(catalog, "h", 5)
    table = catalog.load_table("h")
    current = table.current_snapshot()
    expected = [m.manifest_path for m in current.manifests(table.io) if m.added_snapshot_id == current.snapshot_id]
    for summary in (None, Summary(Operation.APPEND), Summary(Operation.APPEND, **{"deleted-duplicate-files": "1"})):
        stripped = current.model_copy(update={"summary": summary})
        assert changed_file_counts(stripped) is None
        reader = ManifestReader(table.io)
        assert [m.manifest_path for m in reader.own_manifests(stripped)] == expected
        assert reader.list_entries_read == 5
        assert len(reader.manifest_list(stripped)) == 5 and reader.list_entries_read == 5  # cached as whole

    # a format-1 manifest list (by its own header) is read whole too
    catalog.sql("CREATE TABLE {cat}.ns.v1 (id bigint) USING iceberg TBLPROPERTIES ('format-version'='1')")
    for i in range(3):
        catalog.sql(f"INSERT INTO {{cat}}.ns.v1 VALUES ({i})")
    v1 = catalog.load_table("v1")
    decoded = _compare_early_stop(v1)
    assert decoded[v1.metadata.current_snapshot_id] == (3, 3)


@pytest.mark.parametrize("format_version", [2, 3])
def test_early_stop_matches_full_read_on_java_row_level_commits(catalog: Any, format_version: int) -> None:
    """Merged appends, merge-on-read deletes (position deletes, DVs), equality deletes,
    copy-on-write deletes and overwrites, partition drops and compactions, written by Java."""
    w = Workload(
        catalog,
        "t",
        seed=5,
        format_version=format_version,
        partitioned=True,
        mode=MIXED,
        schema_evolution=False,
        partition_evolution=False,
    )
    w.create()
    # merge manifests every few commits, so S's ADDED/DELETED entries also sit among EXISTING ones
    catalog.sql("ALTER TABLE {cat}.ns.t SET TBLPROPERTIES ('commit.manifest.min-count-to-merge'='3')")
    w.insert(rows=20)
    w.insert()
    w.delete()  # merge-on-read: position deletes (v2) or deletion vectors (v3)
    w.delete()  # v3: the new DVs replace the old ones (removed-delete-files)
    w.insert()
    w.update()
    w.eq_delete()
    w.set_mode(COW)
    w.delete()  # copy-on-write: files rewritten (overwrite)
    w.delete_partition()  # metadata-only delete
    w.merge()
    w.overwrite()  # INSERT OVERWRITE
    w.insert()
    w.compact()  # replace
    w.insert()
    table = catalog.load_table("t")
    operations = {s.summary.operation.value for s in table.metadata.snapshots if s.summary}
    assert {"append", "overwrite", "delete"} <= operations, w.describe()
    decoded = _compare_early_stop(table)
    operation = {s.snapshot_id: s.summary.operation.value for s in table.metadata.snapshots if s.summary}
    # Java lists a commit's new data manifests first: appends stop at the first entry; so do
    # copy-on-write rewrites. New delete manifests come after every data manifest.
    assert all(decoded[sid][0] == 1 for sid, op in operation.items() if op == "append"), decoded
    assert any(early < listed for sid, (early, listed) in decoded.items() if operation[sid] != "append"), decoded
