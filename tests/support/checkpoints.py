"""Checkpoint store tests: realistic splits and batches, and raw reads and writes that bypass the store
(what is really on disk, or what an older release wrote)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from icetail.kernel.model import (
    ChangeSplit,
    ChangeTask,
    CommitInfo,
    DataFileRef,
    DeleteContent,
    DeleteFileRef,
    FileChangeKind,
)
from icetail.state.checkpoint import InflightBatch
from tests.support.stores import PG_URL


def make_split(i: int, snapshot_id: int = 10, *, with_deletes: bool = False) -> ChangeSplit:
    """A realistic split of data file number i in the given snapshot."""
    deletes = (
        (
            DeleteFileRef(
                path=f"s3://bucket/t/data/del-{i}.puffin",
                file_format="puffin",
                content=DeleteContent.DELETION_VECTOR,
                record_count=3,
                file_size_in_bytes=512,
                spec_id=0,
                partition="(day=2026-01-01)",
                data_sequence_number=2,
                referenced_data_file=f"s3://bucket/t/data/f-{i}.parquet",
                content_offset=4,
                content_size_in_bytes=40,
            ),
        )
        if with_deletes
        else ()
    )
    task = ChangeTask(
        data_file=DataFileRef(
            path=f"s3://bucket/t/data/f-{i}.parquet",
            file_format="parquet",
            record_count=1000,
            file_size_in_bytes=65536,
            spec_id=0,
            partition="(day=2026-01-01)",
            data_sequence_number=1,
            split_offsets=(4, 32768),
        ),
        kind=FileChangeKind.MODIFIED if with_deletes else FileChangeKind.ADDED,
        commit=CommitInfo(snapshot_id, None, "append", 1_700_000_000_000 + snapshot_id, snapshot_id, 0),
        deletes_after=deletes,
    )
    return ChangeSplit(task=task, row_group_start=i % 2, row_group_end=(i % 2) + 1, estimated_rows=500)


def make_batch(batch_id: str, from_snapshot: int | None, to_snapshot: int, n_splits: int) -> InflightBatch:
    return InflightBatch(
        batch_id=batch_id,
        from_snapshot_exclusive=from_snapshot,
        to_snapshot_inclusive=to_snapshot,
        to_timestamp_ms=1_700_000_000_000 + to_snapshot,
        splits=tuple(make_split(i, to_snapshot, with_deletes=i % 3 == 0) for i in range(n_splits)),
    )


def pg_url_for(schema: str) -> str:
    return f"{PG_URL}?schema={schema}"


def raw_query(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the store's tables directly, bypassing the store (to check what is really on disk)."""
    if store_url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    base, schema = store_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'SET search_path TO "{schema}"')
        return pg.execute(sql.replace("?", "%s"), params).fetchall()


def raw_create(store_url: str, statements: Sequence[str | tuple[str, tuple[Any, ...]]]) -> None:
    """Write a store directly (`?` placeholders), as an older icetail left it: the store is created, not migrated."""
    steps = [(s, ()) if isinstance(s, str) else s for s in statements]
    if store_url.startswith("sqlite:"):
        import sqlite3

        path = Path(store_url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path)
        with conn:
            for sql, params in steps:
                conn.execute(sql, params)
        conn.close()
        return
    base, schema = store_url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
        pg.execute(f'SET search_path TO "{schema}"')
        for sql, params in steps:
            pg.execute(sql.replace("?", "%s"), params)
