"""Schema 9: whether a net batch may be folded in partitions (BatchShape.net_partitioned).

A net batch begun by a release before schema 9 was folded whole in the driver, whose one chunk
may already be written under the first partition's key: after the upgrade it reads FALSE and is
folded whole again, as it began. A batch begun with it set keeps it, in flight and in history.
On SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from icetail.state.checkpoint import BatchShape, Cursor
from icetail.state.migrations import LATEST_VERSION
from icetail.state.store import SqlCheckpointStore, open_store
from tests.support.checkpoints import make_batch, raw_query

START = Cursor.before_first_snapshot()
SHAPE = BatchShape(net=True, reconcile_partition_bytes=1 << 20, net_partitioned=True)


def test_a_net_batch_keeps_its_partitioned_fold_in_flight_and_in_history(store: SqlCheckpointStore) -> None:
    store.ensure_consumer("c", "cat", "db.t", START)
    store.begin_batch("c", dataclasses.replace(make_batch("b1", None, 10, 1), shape=SHAPE))
    loaded = store.load("c")
    assert loaded is not None and loaded.inflight is not None and loaded.inflight.batch.shape == SHAPE
    store.commit_chunk("c", "b1", loaded.inflight.batch.split_ids[0], 5, 1, True)
    assert store.finish_batch("c", "b1").shape == SHAPE


def test_a_net_batch_begun_before_schema_9_is_folded_whole(
    open_test_store: Callable[..., SqlCheckpointStore], store_url: str
) -> None:
    with open_store(store_url) as store:
        store.ensure_consumer("c", "cat", "db.t", START)
        store.begin_batch("c", dataclasses.replace(make_batch("b1", None, 10, 2), shape=SHAPE))
    _downgrade_to_schema_8(store_url)
    store = open_test_store()
    checkpoint = store.load("c")
    assert checkpoint is not None and checkpoint.inflight is not None
    assert checkpoint.inflight.batch.shape == dataclasses.replace(SHAPE, net_partitioned=False)
    assert raw_query(store_url, "SELECT value FROM icetail_meta") == [(str(LATEST_VERSION),)]


def _downgrade_to_schema_8(store_url: str) -> None:
    """What the release before schema 9 left: the same rows, no such column."""
    steps = [
        "DROP TABLE icetail_replicas",  # schema 10
        *(f"ALTER TABLE {t} DROP COLUMN net_partitioned" for t in ("icetail_inflight_batches", "icetail_history")),
        "UPDATE icetail_meta SET value = '8' WHERE key = 'schema_version'",
    ]
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        with conn:
            for sql in steps:
                conn.execute(sql)
        conn.close()
        return
    import psycopg

    base, schema = store_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'SET search_path TO "{schema}"')
        for sql in steps:
            pg.execute(sql)
