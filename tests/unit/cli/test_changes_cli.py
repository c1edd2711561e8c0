"""`icetail changes` / `icetail plan` end to end in-process: outputs and one-line errors."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow.parquet as pq
import pytest

from icetail.monitor.cli.main import main
from tests.support.small_table import SmallTable


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_changes_to_parquet_and_jsonl(small_table: SmallTable, spark: Any, tmp_path: Any, capsys: Any) -> None:
    target = tmp_path / "out.parquet"
    code, _, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--output", str(target))
    assert code == 0, err
    rows = pq.read_table(target).to_pylist()
    kinds = sorted((r["id"], r["_change_type"]) for r in rows)
    assert kinds == [(1, "INSERT"), (2, "DELETE"), (2, "INSERT"), (3, "INSERT"), (4, "INSERT"), (5, "INSERT")]
    assert {r["_change_ordinal"] for r in rows if r["_change_type"] == "DELETE"} == {2}
    assert pq.ParquetFile(target).metadata.num_row_groups == 1  # the small batches of 3 snapshots, regrouped

    first, second = small_table.snapshot_ids[0], small_table.snapshot_ids[1]
    jsonl = tmp_path / "out.jsonl"
    code, _, err = _run(
        capsys,
        "changes",
        "--catalog",
        "core",
        "--table",
        "ns.t",
        "--from-snapshot",
        str(first),
        "--to-snapshot",
        str(second),
        "--output",
        str(jsonl),
    )
    assert code == 0, err
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == [4, 5]
    assert all(r["_change_ordinal"] == 0 and r["_commit_snapshot_id"] == second for r in lines)


def test_plan_json(small_table: SmallTable, capsys: Any) -> None:
    code, out, err = _run(capsys, "plan", "--catalog", "core", "--table", "ns.t", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert [s["operation"] for s in plan["snapshots"]] == ["append", "append", "overwrite"]
    assert plan["snapshots"][2]["tasks_by_kind"] == {"added": 1, "removed": 1}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--catalog", "nope", "--table", "ns.t"], "catalog 'nope' is not configured"),
        (["--catalog", "core", "--table", "ns.missing"], "table 'ns.missing' does not exist"),
        (["--catalog", "core", "--table", "ns.t", "--to-snapshot", "42"], "to snapshot 42 is not in the table"),
        (["--catalog", "core", "--table", "ns.t", "--from-snapshot", "42"], "from snapshot 42 is not in the table"),
        (["--catalog", "core", "--table", "ns.t", "--with-row-lineage"], "--with-row-lineage needs a format-version 3"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    small_table: SmallTable, tmp_path: Any, capsys: Any, args: list[str], needle: str
) -> None:
    target = tmp_path / "out.parquet"
    code, out, err = _run(capsys, "changes", *args, "--output", str(target))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert not target.exists() and os.listdir(tmp_path) == [p for p in os.listdir(tmp_path) if p != "out.parquet"]


def test_from_not_ancestor(small_table: SmallTable, capsys: Any, tmp_path: Any) -> None:
    first, second, third = small_table.snapshot_ids
    code, _, err = _run(
        capsys,
        "changes",
        "--catalog",
        "core",
        "--table",
        "ns.t",
        "--from-snapshot",
        str(third),
        "--to-snapshot",
        str(first),
        "--output",
        str(tmp_path / "x.jsonl"),
    )
    assert code == 2 and f"snapshot {third} is not an ancestor of snapshot {first}" in err


def test_missing_data_file_leaves_no_output(small_table: SmallTable, spark: Any, capsys: Any, tmp_path: Any) -> None:
    table = small_table.load()
    first_file = next(iter(table.scan(snapshot_id=small_table.snapshot_ids[1]).plan_files())).file.file_path
    os.unlink(first_file.removeprefix("file://"))
    target = tmp_path / "out.parquet"
    code, _, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--output", str(target))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "is missing" in err and first_file in err
    assert not target.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".icetail-")] == []


def test_bad_output_suffix(small_table: SmallTable, capsys: Any, tmp_path: Any) -> None:
    code, _, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--output", str(tmp_path / "x.csv"))
    assert code == 2 and "must end in .parquet or .jsonl" in err


def test_remote_output_url_is_refused_not_written_to_a_local_folder(
    small_table: SmallTable, capsys: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--output", "s3://b/x.parquet")
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert "s3:// URL" in err and "local file only" in err
    assert not os.path.exists(tmp_path / "s3:")


def test_changes_net(small_table: SmallTable, spark: Any, tmp_path: Any, capsys: Any) -> None:
    """Row 2, inserted then deleted in the range, vanishes; rows 1 and 3, rewritten by the copy-on-write
    delete, carry that rewrite's ordinal as Java's net changes do."""
    target = tmp_path / "net.parquet"
    code, _, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--net", "--output", str(target))
    assert code == 0, err
    rows = sorted((r["id"], r["_change_type"], r["_change_ordinal"]) for r in pq.read_table(target).to_pylist())
    assert rows == [(1, "INSERT", 2), (3, "INSERT", 2), (4, "INSERT", 1), (5, "INSERT", 1)]
    code, _, err = _run(
        capsys, "changes", "--catalog", "core", "--table", "ns.t", "--net", "--keep-carry-over", "--output", "-"
    )
    assert code == 2 and err.count("\n") == 1 and "--keep-carry-over" in err, err


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_output_files_honour_the_umask(
    small_table: SmallTable, spark: Any, tmp_path: Any, capsys: Any, umask: int
) -> None:
    """`changes --output` wrote 0600 files whatever the umask (mkstemp's mode outlived the rename)."""
    previous = os.umask(umask)
    try:
        for name in ("out.parquet", "out.jsonl"):
            target = tmp_path / name
            code, _, err = _run(capsys, "changes", "--catalog", "core", "--table", "ns.t", "--output", str(target))
            assert code == 0, err
            assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~umask), name
    finally:
        os.umask(previous)


def test_changes_as_debezium_envelopes(small_table: SmallTable, spark: Any, tmp_path: Any, capsys: Any) -> None:
    """`--format debezium`: one before/after/op/source record per change, to a file and to stdout."""
    table = small_table.load()
    target = tmp_path / "cdc.jsonl"
    code, _, err = _run(
        capsys, "changes", "--catalog", "core", "--table", "ns.t", "--format", "debezium", "--output", str(target)
    )
    assert code == 0, err
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted((r["op"], (r["after"] or r["before"])["id"]) for r in records) == [
        ("c", 1), ("c", 2), ("c", 3), ("c", 4), ("c", 5), ("d", 2)
    ]  # fmt: skip
    deleted = next(r for r in records if r["op"] == "d")
    assert deleted["before"] == {"id": 2, "v": "b"} and deleted["after"] is None
    snapshot = table.snapshot_by_id(deleted["source"]["snapshot_id"])
    assert deleted["source"]["sequence_number"] == snapshot.sequence_number
    assert deleted["source"]["table"] == "t" and deleted["source"]["db"] == "ns"
    code, out, err = _run(
        capsys, "changes", "--catalog", "core", "--table", "ns.t", "--format", "debezium", "--output", "-"
    )
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == records
