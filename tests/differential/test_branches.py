"""Branches and tags on Java-written tables, checked against Java's reads of the branch.

A write-audit-publish history: rows on `main`, a branch `audit` created through Spark SQL,
random writes (INSERT, DELETE, UPDATE, MERGE, INSERT OVERWRITE; merge-on-read and copy-on-write)
into `t.branch_audit` and through `spark.wap.branch`, `main` moving on meanwhile, tags on
both. Then:

* `read_changes(branch=...)` and `icetail changes --branch` match the invariant oracle on
  the branch's history, whose end is what Java reads as `VERSION AS OF 'audit'`; ranges
  bounded by `--from-tag`/`--to-tag` likewise; a to-tag off the from-tag's history is refused;
* a consumer following the branch delivers every change once across a fast-forward of main,
  a branch replaced by a non-descendant (refused like a rollback; repaired by a direct diff
  with `--on-missing-cursor diff`) and a dropped branch (its own error, then `reset --branch`);
* `--protect-cursor` keeps the cursor of a branch consumer through expiry, and the repair
  batch equals Java's rows at the cursor against Java's rows of the branch now.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from icetail.kernel.errors import BranchDroppedError, ConfigError, NotAncestorError, RefNotFoundError
from icetail.monitor.cli.main import main
from icetail.monitor.engine.api import read_changes
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.engine.startup import CursorNotDescendantError
from tests.support.expiry import expire
from tests.support.javaref import spark_df_to_arrow
from tests.support.oracle import DELETE_TYPES, INSERT_TYPES, assert_changes_match, canonical_rows, rows_at
from tests.support.sinks import read_parquet_sink
from tests.support.workloads import COW, MOR, Workload

BRANCH_OPS = ("insert", "insert", "delete", "update", "merge", "insert_copies", "overwrite")


def branch_workload(catalog: Any, mode: str, seed: int) -> Workload:
    """A Java table with rows on main and a branch `audit` forked from main's head."""
    w = Workload(catalog, "t", seed=seed, mode=mode, equality_deletes=False, schema_evolution=False,
                 partition_evolution=False)  # fmt: skip
    w.create()
    w.insert(rows=20)
    main_ops(w, 1)
    catalog.sql(f"ALTER TABLE {w.fq} CREATE BRANCH audit")
    return w


def main_ops(w: Workload, count: int) -> None:
    for _ in range(count):
        getattr(w, w.rng.choice(BRANCH_OPS))()


def audit_ops(w: Workload, count: int) -> None:
    """`count` random writes into the branch, through the `branch_audit` identifier."""
    table_fq = w.fq
    w.fq = f"{table_fq}.branch_audit"
    try:
        main_ops(w, count)
    finally:
        w.fq = table_fq


def wap_write(catalog: Any, w: Workload) -> None:
    """One write into the branch the write-audit-publish way: `spark.wap.branch` on the session."""
    catalog.sql(f"ALTER TABLE {w.fq} SET TBLPROPERTIES ('write.wap.enabled'='true')")
    catalog.spark.conf.set("spark.wap.branch", "audit")
    try:
        w.delete()
        w.insert()
    finally:
        catalog.spark.conf.unset("spark.wap.branch")


def head(catalog: Any, ident: str, ref: str) -> int:
    return int(catalog.load_table(ident).metadata.refs[ref].snapshot_id)


def branch_history(catalog: Any, ident: str, ref: str) -> list[int]:
    table = catalog.load_table(ident)
    chain: list[int] = []
    snapshot = table.snapshot_by_id(head(catalog, ident, ref))
    while snapshot is not None:
        chain.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return chain[::-1]


def assert_head_is_javas_branch(catalog: Any, w: Workload, branch: str) -> None:
    """The oracle's end (rows at the head id) is what Java reads for the branch by name."""
    schema = catalog.load_table(w.ident).schema()
    by_name = spark_df_to_arrow(catalog.sql(f"SELECT * FROM {w.fq} VERSION AS OF '{branch}'"))
    expected = rows_at(catalog, w.ident, head(catalog, w.ident, branch), schema)
    assert Counter(canonical_rows(by_name, schema, schema)) == expected


def config(catalog: Any, w: Workload, root: Path, consumer: str, **options: Any) -> PipelineConfig:
    return PipelineConfig(catalog.name, w.ident, f"sqlite:///{root}/state.db", f"parquet://{root}/{consumer}",
                          consumer=consumer, **options)  # fmt: skip


def split_rows(rows: pa.Table, schema: Any) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    names = [f.name for f in schema.fields]
    types = rows.column("_change_type").to_pylist()
    tuples = canonical_rows(rows.select(names), schema, schema)
    deletes = Counter(t for t, k in zip(tuples, types, strict=True) if k in DELETE_TYPES)
    inserts = Counter(t for t, k in zip(tuples, types, strict=True) if k in INSERT_TYPES)
    return deletes, inserts


@pytest.mark.parametrize(("mode", "seed"), [pytest.param(MOR, 31, id="mor"), pytest.param(COW, 32, id="cow")])
def test_branch_and_tag_ranges_match_java(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, capsys: Any, mode: str, seed: int
) -> None:
    catalog.set_env(monkeypatch)
    w = branch_workload(catalog, mode, seed)
    audit_ops(w, 2)
    audit = branch_history(catalog, w.ident, "audit")
    catalog.sql(f"ALTER TABLE {w.fq} CREATE TAG audited AS OF VERSION {audit[-1]}")
    wap_write(catalog, w)
    audit_ops(w, 3)
    main_ops(w, 2)  # main moves on: the branches diverge
    catalog.sql(f"ALTER TABLE {w.fq} CREATE TAG released")  # main's head
    audit = branch_history(catalog, w.ident, "audit")
    main_head = catalog.current_snapshot_id(w.ident)
    assert main_head not in audit and len(audit) >= 7, w.describe()
    assert_head_is_javas_branch(catalog, w, "audit")
    table = catalog.load_table(w.ident)
    context = w.describe()

    on_branch = read_changes(table, branch="audit", spark=spark)
    assert_changes_match(on_branch, catalog, w.ident, None, audit[-1], context=context)
    assert set(on_branch.column("_commit_snapshot_id").to_pylist()) <= set(audit)
    on_main = read_changes(table, spark=spark)  # main is unaffected by the branch
    assert_changes_match(on_main, catalog, w.ident, None, main_head, context=context)
    since_tag = read_changes(table, branch="audit", from_tag="audited", spark=spark)
    assert_changes_match(since_tag, catalog, w.ident, head(catalog, w.ident, "audited"), audit[-1], context=context)
    between_tags = read_changes(table, from_tag="audited", to_tag="audited", spark=spark)
    assert between_tags.num_rows == 0

    with pytest.raises(NotAncestorError, match="is not an ancestor of snapshot"):
        read_changes(table, from_tag="audited", to_tag="released", spark=spark)
    with pytest.raises(RefNotFoundError, match=r"no branch 'adit'; refs: main \(branch\), audit \(branch\), "):
        read_changes(table, branch="adit", spark=spark)
    with pytest.raises(RefNotFoundError, match="'audit' of table .* is a branch, not a tag"):
        read_changes(table, to_tag="audit", spark=spark)

    # the command line reads the same range and names the branch in its plan
    out = tmp_path / "audit.parquet"
    argv = ["--catalog", catalog.name, "--table", w.ident, "--branch", "audit", "--from-tag", "audited"]
    assert main(["changes", *argv, "--output", str(out)]) == 0
    assert_changes_match(pq.read_table(out), catalog, w.ident, head(catalog, w.ident, "audited"), audit[-1],
                         context=context)  # fmt: skip
    capsys.readouterr()
    assert main(["plan", *argv]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert f"branch audit: changes in ({head(catalog, w.ident, 'audited')} (tag audited), {audit[-1]}]" in header


def test_consumer_follows_branch_through_fast_forward_reset_and_drop(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    catalog.set_env(monkeypatch)
    w = branch_workload(catalog, MOR, 41)
    audit_ops(w, 3)
    follow = config(catalog, w, tmp_path, "audit", branch="audit", max_snapshots_per_batch=2)
    with Pipeline(follow, spark=spark) as pipeline:
        assert pipeline.run()
    # a run naming another branch is refused with the ways on, before anything moves
    refusal = r"follows branch 'audit', not 'main'.*reset --state .* --consumer audit --branch main"
    with pytest.raises(ConfigError, match=refusal):
        Pipeline(config(catalog, w, tmp_path, "audit"), spark=spark).open()
    audit_ops(w, 2)
    catalog.sql(f"CALL {catalog.name}.system.fast_forward('{w.ident}', 'main', 'audit')")  # publish
    assert catalog.current_snapshot_id(w.ident) == head(catalog, w.ident, "audit")
    audit_ops(w, 2)
    with Pipeline(follow, spark=spark) as pipeline:
        assert pipeline.run()
    delivered = read_parquet_sink(tmp_path / "audit")
    assert delivered is not None
    cursor = head(catalog, w.ident, "audit")
    # every change of the branch's history exactly once, in order, as Java reads each snapshot
    assert_changes_match(delivered, catalog, w.ident, None, cursor, context=w.describe())
    assert_head_is_javas_branch(catalog, w, "audit")

    # the branch is replaced by a snapshot that is not a descendant of the cursor: like a rollback
    older = branch_history(catalog, w.ident, "audit")[2]
    catalog.sql(f"ALTER TABLE {w.fq} REPLACE BRANCH audit AS OF VERSION {older}")
    audit_ops(w, 1)
    with Pipeline(follow, spark=spark) as pipeline:
        generation = pipeline.checkpoint().generation  # type: ignore[union-attr]
        with pytest.raises(CursorNotDescendantError, match=r"head of branch 'audit'.*--on-missing-cursor diff"):
            pipeline.run()
        assert pipeline.checkpoint().generation == generation  # type: ignore[union-attr]
    with Pipeline(config(catalog, w, tmp_path, "audit", branch="audit", on_missing_cursor="diff"), spark=spark) as p:
        outcomes = p.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed
    new_head = head(catalog, w.ident, "audit")
    schema = catalog.load_table(w.ident).schema()
    everything = read_parquet_sink(tmp_path / "audit")
    assert everything is not None
    repair = everything.filter(pc.equal(everything.column("_commit_snapshot_id"), new_head))
    deletes, inserts = split_rows(repair, schema)
    before, after = rows_at(catalog, w.ident, cursor, schema), rows_at(catalog, w.ident, new_head, schema)
    assert deletes == before - after and inserts == after - before

    # the branch is dropped (published and removed): its own error, then the consumer moves to main
    catalog.sql(f"ALTER TABLE {w.fq} DROP BRANCH audit")
    dropped = rf"branch 'audit' .* no longer exists.*delivered up to snapshot {new_head}.*--branch main"
    with Pipeline(follow, spark=spark) as pipeline, pytest.raises(BranchDroppedError, match=dropped):
        pipeline.run()
    state = f"sqlite:///{tmp_path}/state.db"
    assert main(["reset", "--state", state, "--consumer", "audit", "--branch", "main", "--to", "latest"]) == 0
    capsys.readouterr()
    assert main(["status", "--state", state, "--consumer", "audit", "--json"]) == 0
    assert '"branch": "main"' in capsys.readouterr().out
    main_ops(w, 1)
    with Pipeline(config(catalog, w, tmp_path, "audit"), spark=spark) as pipeline:
        more = pipeline.run()
    assert len(more) == 1 and more[0].to_snapshot_inclusive == catalog.current_snapshot_id(w.ident)


def test_protect_cursor_on_a_branch_survives_expiry(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    catalog.set_env(monkeypatch)
    w = branch_workload(catalog, MOR, 51)
    audit_ops(w, 2)
    protected = config(catalog, w, tmp_path, "p", branch="audit", protect_cursor=True)
    with Pipeline(protected, spark=spark) as pipeline:
        assert pipeline.run()
    cursor = head(catalog, w.ident, "audit")
    assert head(catalog, w.ident, "icetail-p") == cursor  # the tag is on the branch's snapshot
    audit_ops(w, 3)
    main_ops(w, 1)
    expire(catalog, w.ident, "procedure-retain-last")
    table = catalog.load_table(w.ident)
    assert table.snapshot_by_id(cursor) is not None
    assert len(branch_history(catalog, w.ident, "audit")) < 3, "expiry should have broken the branch's chain"
    with Pipeline(protected, spark=spark) as pipeline:
        outcomes = pipeline.run()
    assert len(outcomes) == 1 and outcomes[0].collapsed, outcomes
    now = head(catalog, w.ident, "audit")
    assert head(catalog, w.ident, "icetail-p") == now
    schema = table.schema()
    delivered = read_parquet_sink(tmp_path / "p")
    assert delivered is not None
    repair = delivered.filter(pc.equal(delivered.column("_commit_snapshot_id"), now))
    deletes, inserts = split_rows(repair, schema)
    before, after = rows_at(catalog, w.ident, cursor, schema), rows_at(catalog, w.ident, now, schema)
    assert deletes == before - after and inserts == after - before
    assert_head_is_javas_branch(catalog, w, "audit")


def test_start_at_a_tag_on_the_branch(catalog: Any, spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    catalog.set_env(monkeypatch)
    w = branch_workload(catalog, COW, random.Random(61).randrange(1000))
    audit_ops(w, 2)
    catalog.sql(f"ALTER TABLE {w.fq} CREATE TAG audited AS OF VERSION {head(catalog, w.ident, 'audit')}")
    main_ops(w, 1)
    catalog.sql(f"ALTER TABLE {w.fq} CREATE TAG released")
    audit_ops(w, 2)
    with pytest.raises(NotAncestorError, match="tag 'released' .* is not on the history of the followed branch"):
        Pipeline(config(catalog, w, tmp_path, "off", branch="audit", start="tag:released"), spark=spark).open()
    with Pipeline(config(catalog, w, tmp_path, "c", branch="audit", start="tag:audited"), spark=spark) as pipeline:
        assert pipeline.run()
    delivered = read_parquet_sink(tmp_path / "c")
    assert delivered is not None
    tagged = head(catalog, w.ident, "audited")
    assert_changes_match(delivered, catalog, w.ident, tagged, head(catalog, w.ident, "audit"), context=w.describe())
