"""Checkpoint stores for pipeline tests: fresh SQLite or PostgreSQL stores, and what they say between runs."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from icetail.state.store import open_store

PG_URL = os.environ.get("ICETAIL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pg_unavailable() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_URL} unreachable: {exc}"


def new_state_url(kind: str, root: Path) -> str:
    """A URL of an empty store: a SQLite file under `root`, or a fresh PostgreSQL schema."""
    if kind == "sqlite":
        root.mkdir(parents=True, exist_ok=True)  # icetail creates no folder for a SQLite store
        return f"sqlite:///{root.resolve()}/state.db"
    if kind == "postgresql":
        return f"{PG_URL}?schema=icetail_pipe_{uuid.uuid4().hex[:12]}"
    raise ValueError(kind)


def drop_state(url: str) -> None:
    if "?schema=" not in url:
        return
    import psycopg

    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@dataclass(frozen=True)
class StateView:
    """What the store says about one consumer (read by the test between runs)."""

    exists: bool
    cursor: int | None = None
    generation: int = 0
    lease_owner: str | None = None
    inflight_batch: str | None = None
    splits_done: int = 0
    splits: int = 0
    committed_rows: int = 0  # rows of finished batches (history) plus rows committed in flight

    @property
    def stage(self) -> str:
        if not self.exists:
            return "no consumer yet"
        if self.inflight_batch is None:
            return f"between batches (generation {self.generation})"
        return f"in flight {self.splits_done}/{self.splits} splits done"


def view_state(url: str, consumer: str) -> StateView:
    with open_store(url) as store:
        checkpoint = store.load(consumer)
        if checkpoint is None:
            return StateView(False)
        history = store.history(consumer)
    inflight = checkpoint.inflight
    return StateView(
        exists=True,
        cursor=checkpoint.cursor.snapshot_id,
        generation=checkpoint.generation,
        lease_owner=checkpoint.lease.owner if checkpoint.lease else None,
        inflight_batch=inflight.batch.batch_id if inflight else None,
        splits_done=sum(1 for p in inflight.progress if p.done) if inflight else 0,
        splits=len(inflight.progress) if inflight else 0,
        committed_rows=sum(h.rows for h in history) + (inflight.rows_emitted if inflight else 0),
    )


def expire_dead_lease(url: str, consumer: str) -> str | None:
    """Release the lease a killed run left behind (what its TTL expiring would do); the owner, if any.

    `icetail run` has no flag for the lease TTL (120 s), so without this every restart after a
    SIGKILL would be refused for two minutes.
    """
    with open_store(url) as store:
        checkpoint = store.load(consumer)
        if checkpoint is None or checkpoint.lease is None:
            return None
        store.release_lease(consumer, checkpoint.lease.owner)
        return checkpoint.lease.owner
