"""`--from-timestamp` / `--to-timestamp` on `changes` and `plan`, and the Python API's time bounds (issue 25).

Both ends are inclusive, as Delta's `startingTimestamp`/`endingTimestamp`: a snapshot committed
in the very millisecond given is in the range at either end. (Iceberg's changelog view takes a
`start-timestamp` as exclusive: it leaves out a snapshot committed exactly then.)
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.api import plan_range
from icetail.monitor.engine.range_bounds import RangeBounds
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.processes import child_env, icetail_lines, run_icetail

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


@pytest.fixture
def timed(tmp_path: Path) -> tuple[LocalCatalog, list[int], list[int]]:
    """Three appends at distinct milliseconds; returns the catalog, snapshot ids and commit times (ms)."""
    cat = new_catalog(tmp_path / "cat", "times")
    cat.catalog().create_namespace("ns")
    table = cat.catalog().create_table("ns.t", schema=SCHEMA)
    for i in range(3):
        table.append(pa.table({"id": [i]}, SCHEMA))
        time.sleep(0.01)
    snapshots = cat.load("ns.t").metadata.snapshots
    assert len({s.timestamp_ms for s in snapshots}) == 3
    return cat, [s.snapshot_id for s in snapshots], [s.timestamp_ms for s in snapshots]


def iso(ms: int, zone: datetime.timezone = datetime.timezone.utc) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=zone).isoformat(timespec="milliseconds")


def plan_ids(cat: LocalCatalog, *args: str) -> list[int]:
    done = run_icetail(["plan", "--catalog", "times", "--table", "ns.t", "--json", *args], child_env([cat]))
    assert done.returncode == 0, done.stderr
    return [s["snapshot_id"] for s in json.loads(done.stdout)["snapshots"]]


def test_both_ends_are_inclusive_at_the_millisecond(timed: tuple[LocalCatalog, list[int], list[int]]) -> None:
    cat, ids, at = timed
    assert plan_ids(cat, "--from-timestamp", iso(at[1])) == ids[1:]
    assert plan_ids(cat, "--from-timestamp", iso(at[1] + 1)) == ids[2:]
    assert plan_ids(cat, "--to-timestamp", iso(at[1])) == ids[:2]
    assert plan_ids(cat, "--to-timestamp", iso(at[1] - 1)) == ids[:1]
    assert plan_ids(cat, "--from-timestamp", iso(at[1]), "--to-timestamp", iso(at[1])) == ids[1:2]


def test_times_without_an_offset_are_utc_and_offsets_are_honoured(
    timed: tuple[LocalCatalog, list[int], list[int]],
) -> None:
    cat, ids, at = timed
    naive = iso(at[1]).removesuffix("+00:00")
    plus_two = iso(at[1], datetime.timezone(datetime.timedelta(hours=2)))
    assert plan_ids(cat, "--from-timestamp", naive) == plan_ids(cat, "--from-timestamp", plus_two) == ids[1:]
    assert plan_ids(cat, "--from-timestamp", iso(at[1]).replace("+00:00", "Z")) == ids[1:]


@pytest.mark.parametrize("command", ["changes", "plan"])
def test_the_help_says_offsets_are_taken(command: str) -> None:
    """Not "UTC without an offset", which read as if offsets were refused (issue 33)."""
    done = run_icetail([command, "--help"], child_env())
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--from-timestamp" in text and text.count("(with an offset, +02:00 or Z; without one, UTC)") == 2, text
    assert "UTC without an offset" not in text


def test_out_of_history_times_are_empty_ranges(timed: tuple[LocalCatalog, list[int], list[int]]) -> None:
    cat, ids, at = timed
    assert plan_ids(cat, "--from-timestamp", iso(at[2] + 1)) == []  # after the head: nothing yet
    assert plan_ids(cat, "--to-timestamp", iso(at[0] - 1)) == []  # before the first snapshot
    assert plan_ids(cat, "--from-timestamp", iso(at[0] - 60_000)) == ids  # before the first: everything
    assert plan_ids(cat, "--from-timestamp", iso(at[2]), "--to-snapshot", str(ids[0])) == []  # to before from


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--from-snapshot", "1", "--from-timestamp", "2026-01-01"], "--from-snapshot and --from-timestamp both bound"),
        (["--to-tag", "x", "--to-timestamp", "2026-01-01"], "--to-tag and --to-timestamp both bound the to-end"),
        (["--from-timestamp", "yesterday"], "--from-timestamp 'yesterday' is not an ISO 8601 time"),
        (["--from-timestamp", "2026-02-01", "--to-timestamp", "2026-01-01"], "after its end"),
    ],
)
def test_bad_time_bounds_are_one_line(
    timed: tuple[LocalCatalog, list[int], list[int]], tmp_path: Path, args: list[str], needle: str
) -> None:
    cat, _, _ = timed
    for command in (["plan"], ["changes", "--output", str(tmp_path / "o.jsonl")]):
        done = run_icetail([*command, "--catalog", "times", "--table", "ns.t", *args], child_env([cat]))
        lines = icetail_lines(done.stderr)
        assert (done.returncode, done.stdout, len(lines)) == (2, "", 1), done.stderr
        assert needle in lines[0], lines
    assert not (tmp_path / "o.jsonl").exists()


def test_changes_reads_a_time_range(timed: tuple[LocalCatalog, list[int], list[int]], tmp_path: Path) -> None:
    cat, ids, at = timed
    args = ["--from-timestamp", iso(at[1]), "--to-timestamp", iso(at[1]), "--output", "-"]
    done = run_icetail(["changes", "--catalog", "times", "--table", "ns.t", *args], child_env([cat], tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["id"], r["_change_type"], r["_commit_snapshot_id"]) for r in rows] == [(1, "INSERT", ids[1])]


def test_python_api_time_bounds(timed: tuple[LocalCatalog, list[int], list[int]]) -> None:
    cat, ids, at = timed
    table = cat.load("ns.t")

    def commits(**bounds: object) -> list[int]:
        return [c.snapshot_id for c in plan_range(table, RangeBounds(**bounds)).commits]  # type: ignore[arg-type]

    instant = datetime.datetime.fromtimestamp(at[1] / 1000, tz=datetime.timezone.utc)
    assert commits(from_timestamp_inclusive=at[1]) == commits(from_timestamp_inclusive=instant) == ids[1:]
    assert commits(from_timestamp_exclusive=at[1]) == ids[2:]  # Iceberg's start-timestamp
    assert commits(to_timestamp_inclusive=instant) == ids[:2]
    with pytest.raises(ConfigError, match=r"start of the range is given twice \(a snapshot id and a timestamp\)"):
        plan_range(table, RangeBounds(ids[0], from_timestamp_inclusive=at[1]))
