"""--protect-cursor keeps tag icetail-<consumer> on the committed snapshot, moving with it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from icetail.monitor.cli.main import main
from tests.support.small_table import SCHEMA, SmallTable


def guarded_run(tmp_path: Any) -> list[str]:
    """`icetail run` of the small table for consumer `guarded` with --protect-cursor."""
    return [
        "run", "--catalog", "core", "--table", "ns.t", "--state", f"sqlite:///{tmp_path}/state.db",
        "--sink", f"parquet://{tmp_path}/sink", "--consumer", "guarded", "--protect-cursor",
    ]  # fmt: skip


def test_tag_follows_the_cursor(small_table: SmallTable, spark: Any, tmp_path: Any) -> None:
    args = guarded_run(tmp_path)
    assert main(args) == 0
    table = small_table.load()
    assert table.metadata.refs["icetail-guarded"].snapshot_id == small_table.snapshot_ids[-1]
    table.append(pa.table({"id": [7], "v": ["g"]}, SCHEMA))
    assert main(args) == 0
    table = small_table.load()
    assert table.metadata.refs["icetail-guarded"].snapshot_id == table.metadata.current_snapshot_id


def test_a_tag_left_behind_catches_up_with_nothing_new_to_deliver(
    small_table: SmallTable, spark: Any, tmp_path: Any
) -> None:
    """A run killed between a batch's commit and its tag's move leaves the tag a batch behind; the
    next run, though caught up, puts it on the cursor (found by the repair crash test's SIGKILLs)."""
    args = guarded_run(tmp_path)
    assert main(args) == 0
    table = small_table.load()
    with table.manage_snapshots() as manage:  # the state that kill leaves: the tag on an older snapshot
        manage.remove_tag("icetail-guarded")
        manage.create_tag(small_table.snapshot_ids[0], "icetail-guarded")
    assert main(args) == 0  # nothing new: no batch
    table = small_table.load()
    assert table.metadata.refs["icetail-guarded"].snapshot_id == small_table.snapshot_ids[-1]


def test_protect_cursor_on_a_v3_table_is_refused_before_any_batch(
    catalog: Any, monkeypatch: Any, tmp_path: Any, capsys: Any
) -> None:
    """pyiceberg cannot write v3 metadata through a SQL catalog, so the tag could never move:
    refused at start with one line, before anything is delivered."""
    catalog.set_env(monkeypatch)
    fq = catalog.fq("v3t")
    catalog.sql(f"CREATE TABLE {fq} (id bigint) USING iceberg TBLPROPERTIES ('format-version'='3')")
    catalog.sql(f"INSERT INTO {fq} VALUES (1), (2)")
    sink = tmp_path / "sink"
    args = [
        "run", "--catalog", catalog.name, "--table", catalog.ident("v3t"), "--state",
        f"sqlite:///{tmp_path}/state.db", "--sink", f"parquet://{sink}", "--protect-cursor",
    ]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "format-version 3" in err[0] and "--protect-cursor" in err[0], err
    assert not list(sink.glob("*.parquet"))
    assert "icetail-" not in "".join(catalog.load_table("v3t").metadata.refs)
    assert main(args[:-1]) == 0  # without the flag the same table is followed
    assert list(sink.glob("*.parquet"))
