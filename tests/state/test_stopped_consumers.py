"""Consumers `serve` stopped (issue 24 §3): recorded in the checkpoint store with a one-line reason and
when, cleared when the consumer delivers again, and named by `icetail status` (text and JSON), on
SQLite and PostgreSQL; a store of schema 7 gains the record without losing anything.
"""

from __future__ import annotations

import datetime
import json

import pytest

from icetail.monitor.cli.main import main as cli_main
from icetail.state.checkpoint import Cursor
from icetail.state.migrations import LATEST_VERSION, META_DDL, MIGRATIONS
from icetail.state.sql_stopped import STOP_REASON_CHARS
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import raw_create, raw_query


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat(timespec="seconds")


def test_a_stop_is_recorded_kept_and_cleared(store: SqlCheckpointStore) -> None:
    assert store.stopped_consumers() == ()
    first = store.record_stopped("bad", "prod", "db.bad", "data file f.parquet is missing; restore it\n  Traceback ...")
    assert (first.consumer, first.catalog, first.table) == ("bad", "prod", "db.bad")
    assert first.reason == "data file f.parquet is missing; restore it"  # the first line only
    assert first.stopped_at_ms == first.updated_at_ms > 0
    store.record_stopped("other", "prod", "db.other", "x" * (STOP_REASON_CHARS + 50))

    again = store.record_stopped("bad", "prod", "db.bad", "catalog prod is unreachable")  # a retry failed again
    assert again.reason == "catalog prod is unreachable"
    assert again.stopped_at_ms == first.stopped_at_ms  # stopped since the first stop
    assert again.updated_at_ms >= first.updated_at_ms
    listed = store.stopped_consumers()
    assert [s.consumer for s in listed] == ["bad", "other"] and listed[0] == again
    assert listed[1].reason == "x" * STOP_REASON_CHARS

    assert store.clear_stopped("bad") is True
    assert store.clear_stopped("bad") is False  # nothing left to clear
    assert [s.consumer for s in store.stopped_consumers()] == ["other"]


def test_a_stop_is_seen_by_another_connection(store: SqlCheckpointStore, store_url: str) -> None:
    store.ensure_consumer("c", "prod", "db.t", Cursor(5, 1005))
    store.record_stopped("c", "prod", "db.t", "refused by --verify strict")
    with open_store(store_url, create=False) as other:
        assert [(s.consumer, s.reason) for s in other.stopped_consumers()] == [("c", "refused by --verify strict")]
        assert other.load("c") is not None  # the consumer itself is untouched


def test_a_schema_7_store_is_migrated_and_keeps_its_consumers(store_url: str) -> None:
    raw_create(
        store_url,
        [
            META_DDL,
            *(s for m in MIGRATIONS if m.version <= 7 for s in m.statements),
            "INSERT INTO icetail_meta VALUES ('schema_version', '7')",
            "INSERT INTO icetail_consumers (consumer, catalog_name, table_name, cursor_snapshot_id, "
            "cursor_timestamp_ms, generation, created_at_ms, updated_at_ms, sink_url) "
            "VALUES ('old', 'cat', 'db.t', 5, 1005, 3, 1, 1, 'parquet:///o')",
        ],
    )
    with open_store(store_url) as store:
        checkpoint = store.load("old")
        assert checkpoint is not None and checkpoint.cursor == Cursor(5, 1005) and checkpoint.generation == 3
        assert store.stopped_consumers() == ()
        store.record_stopped("old", "cat", "db.t", "boom")
        assert [s.reason for s in store.stopped_consumers()] == ["boom"]
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]
    assert LATEST_VERSION >= 8


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(["status", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_names_stopped_consumers_and_why(
    store: SqlCheckpointStore, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Text and JSON: a stopped consumer with a checkpoint, one that never started, one running."""
    store.ensure_consumer("bad", "nocat", "db.bad", Cursor(5, 1005), sink="parquet:///out/bad")
    store.ensure_consumer("good", "nocat", "db.good", Cursor(6, 1006), sink="parquet:///out/good")
    bad = store.record_stopped("bad", "nocat", "db.bad", "data file /w/f.parquet is missing (deleted outside Iceberg)")
    never = store.record_stopped("new", "nocat", "db.new", "catalog nocat is not configured")

    code, out, err = status(capsys, "--state", store_url, "--json")
    assert code == 0, err
    reports = {r["consumer"]: r for r in json.loads(out)}
    assert sorted(reports) == ["bad", "good", "new"]
    assert reports["bad"]["stopped"] == {
        "reason": bad.reason,
        "stopped_at": iso(bad.stopped_at_ms),
        "reason_recorded_at": iso(bad.updated_at_ms),
    }
    assert reports["bad"]["cursor_snapshot_id"] == 5
    assert reports["good"]["stopped"] is None
    assert reports["new"] == {
        "consumer": "new",
        "catalog": "nocat",
        "table": "db.new",
        "never_started": True,
        "stopped": {
            "reason": never.reason,
            "stopped_at": iso(never.stopped_at_ms),
            "reason_recorded_at": iso(never.updated_at_ms),
        },
    }

    code, out, err = status(capsys, "--state", store_url)
    assert code == 0, err
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert f"STOPPED by serve since {iso(bad.stopped_at_ms)}: {bad.reason}" in lines["bad"]
    assert "STOPPED" not in lines["good"]
    assert lines["new"] == (
        f"new: nocat.db.new, never started; STOPPED by serve since {iso(never.stopped_at_ms)}: {never.reason}"
    )

    code, out, err = status(capsys, "--state", store_url, "--consumer", "new", "--json")
    assert code == 0, err
    assert [r["consumer"] for r in json.loads(out)] == ["new"]

    store.clear_stopped("bad")  # it delivers again
    code, out, err = status(capsys, "--state", store_url, "--consumer", "bad", "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["stopped"] is None
