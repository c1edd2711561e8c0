"""Schema versioning: migrate an empty store on open, refuse a store newer than this code."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from icetail.kernel.errors import StateError
from icetail.kernel.model import ChangeSplit
from icetail.state.checkpoint import BatchShape, ChunkCommit, Cursor
from icetail.state.codec import VERSION_KEY, encode_split
from icetail.state.migrations import LATEST_VERSION, META_DDL, MIGRATIONS, SUPPORTED_VERSIONS, pending_migrations
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_split, raw_create, raw_query


def test_empty_database_is_migrated_on_open(store: SqlCheckpointStore, store_url: str) -> None:
    assert raw_query(store_url, "SELECT value FROM icetail_meta WHERE key = 'schema_version'") == [
        (str(LATEST_VERSION),)
    ]
    for table in ("icetail_consumers", "icetail_inflight_batches", "icetail_inflight_splits", "icetail_history"):
        assert raw_query(store_url, f"SELECT COUNT(*) FROM {table}") == [(0,)]


def test_reopening_keeps_data(open_test_store: Callable[..., SqlCheckpointStore]) -> None:
    first = open_test_store()
    first.ensure_consumer("c", "cat", "db.t", Cursor(1, 1001))
    first.close()
    second = open_test_store()
    cp = second.load("c")
    assert cp is not None and cp.cursor == Cursor(1, 1001)


def test_newer_schema_is_refused(open_test_store: Callable[..., SqlCheckpointStore], store_url: str) -> None:
    open_test_store().close()
    newer = LATEST_VERSION + 7
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE icetail_meta SET value = ? WHERE key = 'schema_version'", (str(newer),))
        conn.close()
    else:
        import psycopg

        base, schema = store_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            pg.execute(f'UPDATE "{schema}".icetail_meta SET value = %s WHERE key = %s', (str(newer), "schema_version"))
    with pytest.raises(StateError) as info:
        open_store(store_url)
    message = str(info.value)
    assert f"schema version {newer}" in message
    assert ", ".join(map(str, SUPPORTED_VERSIONS)) in message
    assert "upgrade icetail" in message
    # the refusal changed nothing
    assert raw_query(store_url, "SELECT value FROM icetail_meta WHERE key = 'schema_version'") == [(str(newer),)]


def test_garbage_version_is_refused(open_test_store: Callable[..., SqlCheckpointStore], store_url: str) -> None:
    open_test_store().close()
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE icetail_meta SET value = 'x1' WHERE key = 'schema_version'")
        conn.close()
    else:
        import psycopg

        base, schema = store_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            pg.execute(f"UPDATE \"{schema}\".icetail_meta SET value = 'x1' WHERE key = 'schema_version'")
    with pytest.raises(StateError, match="unreadable schema version 'x1'"):
        open_store(store_url)


def test_concurrent_first_opens_migrate_once(store_url: str) -> None:
    """Several processes starting at once against an empty database must not trip over each other."""
    errors: list[BaseException] = []
    stores: list[SqlCheckpointStore] = []

    def opener() -> None:
        try:
            stores.append(open_store(store_url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    assert raw_query(store_url, "SELECT COUNT(*) FROM icetail_meta") == [(1,)]


def test_pending_migrations_message_lists_supported_versions() -> None:
    assert pending_migrations(0, "x")[0].version == 1
    assert pending_migrations(LATEST_VERSION, "x") == ()
    with pytest.raises(StateError, match=r"supports only schema versions 1\b.*upgrade icetail"):
        pending_migrations(LATEST_VERSION + 1, "sqlite:///s.db")


def _v1_split_text(split: ChangeSplit) -> str:
    """The split as icetail before split format 2 wrote it: the same JSON without a version key (and
    without format 3's first_row_id)."""
    raw = json.loads(encode_split(split))
    del raw[VERSION_KEY]
    del raw["task"]["data_file"]["first_row_id"]
    return json.dumps(raw, sort_keys=True, separators=(",", ":"))


def test_a_schema_2_store_gets_each_batch_shape_from_its_id_and_resumes(store_url: str) -> None:
    """Schema 3 moves chunk size, ordinals and the collapsed marker out of batch ids into typed columns."""
    splits = [make_split(i, 9) for i in range(2)]
    batch_id = "b000004-0123abcd-c800-o7-n2"
    statements: list[str | tuple[str, tuple[object, ...]]] = [
        META_DDL,
        *(s for m in MIGRATIONS if m.version <= 2 for s in m.statements),
        "INSERT INTO icetail_meta VALUES ('schema_version', '2')",
        "INSERT INTO icetail_consumers VALUES ('old', 'cat', 'db.t', 5, 1005, 3, NULL, NULL, 1, 1, 'parquet:///o')",
        f"INSERT INTO icetail_inflight_batches VALUES ('old', '{batch_id}', 5, 9, 1009, 2, 100)",
        *(
            (
                "INSERT INTO icetail_inflight_splits VALUES ('old', ?, ?, ?, ?, ?, ?, ?, NULL, 100)",
                (batch_id, i, s.split_id, _v1_split_text(s), 300 if i == 0 else None, 300 if i == 0 else 0, False),
            )
            for i, s in enumerate(splits)
        ),
        "INSERT INTO icetail_history VALUES ('old', 2, 'b000002-89abcdef-c0-o0-n5', NULL, 3, 40, 1, 10, 20)",
        "INSERT INTO icetail_history VALUES ('old', 3, 'b000003-fedcba98-c0-o5-n1-d1', 3, 5, 4, 1, 30, 40)",
        "INSERT INTO icetail_history VALUES ('old', 1, 'b1', NULL, 2, 2, 1, 1, 2)",  # no fields: read as 0
    ]
    raw_create(store_url, statements)
    with open_store(store_url) as store:
        checkpoint = store.load("old")
        assert checkpoint is not None and checkpoint.inflight is not None
        batch = checkpoint.inflight.batch
        assert batch.shape == BatchShape(chunk_rows=800, first_ordinal=7, snapshot_count=2, collapsed=False)
        assert batch.splits == tuple(splits)
        assert [(p.next_row_exclusive, p.rows_emitted, p.done) for p in checkpoint.inflight.progress] == [
            (300, 300, False),
            (None, 0, False),
        ]
        assert [(h.batch_id, h.shape) for h in store.history("old")] == [
            ("b000003-fedcba98-c0-o5-n1-d1", BatchShape(None, 5, 1, True)),
            ("b000002-89abcdef-c0-o0-n5", BatchShape(None, 0, 5, False)),
            ("b1", BatchShape()),
        ]
        # the resumed batch finishes under the new code, and its history entry keeps the migrated shape
        store.commit_chunks("old", batch_id, [ChunkCommit(s.split_id, 1000, 10, True) for s in splits])
        entry = store.finish_batch("old", batch_id)
        assert entry.shape == batch.shape and entry.shape.next_ordinal == 9
        assert store.history("old", 1)[0].shape == batch.shape
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]
