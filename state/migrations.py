"""Ordered schema migrations of the checkpoint store, shared by SQLite and PostgreSQL.

The store records its schema version in `icetail_meta`; on open, every migration newer than
that is applied in one transaction. A store newer than this code is refused rather than
written with rules it does not know. The SQL here uses only what both databases accept.
To change the schema, append a Migration; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from icetail.kernel.errors import StateError

META_TABLE = "icetail_meta"
SCHEMA_VERSION_KEY = "schema_version"

# Created before the version is read, so it can never change shape: key/value text.
META_DDL = f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


class MigrationTx(Protocol):
    """The part of a store transaction a data migration uses (`?` placeholders on both databases)."""

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]: ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> int: ...


@dataclass(frozen=True)
class Migration:
    """DDL `statements`, then `backfill` (rewriting existing rows in Python), in the same transaction."""

    version: int
    summary: str
    statements: tuple[str, ...]
    backfill: Callable[[MigrationTx], None] | None = None


_V1 = (
    """
    CREATE TABLE icetail_consumers (
        consumer TEXT PRIMARY KEY,
        catalog_name TEXT NOT NULL,
        table_name TEXT NOT NULL,
        cursor_snapshot_id BIGINT,
        cursor_timestamp_ms BIGINT,
        generation BIGINT NOT NULL,
        lease_owner TEXT,
        lease_expires_at_ms BIGINT,
        created_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE icetail_inflight_batches (
        consumer TEXT PRIMARY KEY REFERENCES icetail_consumers (consumer),
        batch_id TEXT NOT NULL,
        from_snapshot_exclusive BIGINT,
        to_snapshot_inclusive BIGINT NOT NULL,
        to_timestamp_ms BIGINT NOT NULL,
        split_count INTEGER NOT NULL,
        created_at_ms BIGINT NOT NULL,
        UNIQUE (consumer, batch_id)
    )
    """,
    """
    CREATE TABLE icetail_inflight_splits (
        consumer TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        split_id TEXT NOT NULL,
        split_json TEXT NOT NULL,
        next_row_exclusive BIGINT,
        rows_emitted BIGINT NOT NULL,
        done BOOLEAN NOT NULL,
        sink_token TEXT,
        updated_at_ms BIGINT NOT NULL,
        PRIMARY KEY (consumer, batch_id, split_id),
        UNIQUE (consumer, batch_id, ordinal),
        FOREIGN KEY (consumer, batch_id) REFERENCES icetail_inflight_batches (consumer, batch_id)
    )
    """,
    """
    CREATE TABLE icetail_history (
        consumer TEXT NOT NULL REFERENCES icetail_consumers (consumer),
        seq BIGINT NOT NULL,
        batch_id TEXT NOT NULL,
        from_snapshot_exclusive BIGINT,
        to_snapshot_inclusive BIGINT NOT NULL,
        row_count BIGINT NOT NULL,
        split_count INTEGER NOT NULL,
        started_at_ms BIGINT NOT NULL,
        finished_at_ms BIGINT NOT NULL,
        PRIMARY KEY (consumer, seq)
    )
    """,
)

# The sink each consumer delivers to, in normalized form; NULL for a consumer created before
# this version, whose next run records it (see Pipeline.open).
_V2 = ("ALTER TABLE icetail_consumers ADD COLUMN sink_url TEXT",)

# How each batch was planned, in typed columns (BatchShape) rather than parsed out of its id.
_SHAPE_COLUMNS = (
    "chunk_rows BIGINT",  # NULL: one row group per chunk
    "first_ordinal BIGINT NOT NULL DEFAULT 0",
    "snapshot_count INTEGER NOT NULL DEFAULT 0",
    "collapsed BOOLEAN NOT NULL DEFAULT FALSE",
)
_V3 = tuple(
    f"ALTER TABLE {table} ADD COLUMN {column}"
    for table in ("icetail_inflight_batches", "icetail_history")
    for column in _SHAPE_COLUMNS
)


def _shape_of_v2_batch_id(batch_id: str) -> tuple[int | None, int, int, bool]:
    """(chunk_rows, first_ordinal, snapshot_count, collapsed) as icetail before schema 3 wrote them into batch ids.

    Those ids read `b<generation>-<hex>-c<chunk rows, 0 for none>-o<first ordinal>-n<snapshots>[-d1]`;
    a field that is missing reads as the code of that time read it (0, or not collapsed).
    """
    fields: dict[str, int] = {}
    for part in batch_id.split("-")[2:]:
        if part[:1] and part[1:].isdigit():
            fields.setdefault(part[0], int(part[1:]))
    return fields.get("c") or None, fields.get("o", 0), fields.get("n", 0), fields.get("d") == 1


def _backfill_v3(tx: MigrationTx) -> None:
    """Batches in flight and in the history written before schema 3 get their shape from their ids."""
    for consumer, batch_id in tx.query("SELECT consumer, batch_id FROM icetail_inflight_batches"):
        tx.execute(
            "UPDATE icetail_inflight_batches SET chunk_rows = ?, first_ordinal = ?, snapshot_count = ?, collapsed = ? "
            "WHERE consumer = ? AND batch_id = ?",
            (*_shape_of_v2_batch_id(batch_id), consumer, batch_id),
        )
    for consumer, seq, batch_id in tx.query("SELECT consumer, seq, batch_id FROM icetail_history"):
        tx.execute(
            "UPDATE icetail_history SET chunk_rows = ?, first_ordinal = ?, snapshot_count = ?, collapsed = ? "
            "WHERE consumer = ? AND seq = ?",
            (*_shape_of_v2_batch_id(batch_id), consumer, seq),
        )


# The branch each consumer follows; consumers created before this version followed the current
# snapshot, which is the head of `main`.
_V4 = ("ALTER TABLE icetail_consumers ADD COLUMN branch TEXT NOT NULL DEFAULT 'main'",)


# Whether a batch delivers its net changes (`--net`): a resumed batch keeps the mode it began with.
_V5 = tuple(
    f"ALTER TABLE {table} ADD COLUMN net BOOLEAN NOT NULL DEFAULT FALSE"
    for table in ("icetail_inflight_batches", "icetail_history")
)


# The schema id each batch's rows are projected onto (BatchShape.schema_id). NULL for a batch
# written before schema 6: it was planned across schema changes and projected onto its
# to-snapshot's schema, which is what the pipeline keeps doing for it.
_V6 = tuple(
    f"ALTER TABLE {table} ADD COLUMN schema_id INTEGER" for table in ("icetail_inflight_batches", "icetail_history")
)


# Snapshots reconciled in partitions (reader/changes/shuffle.py): the partition size each batch was cut
# with (NULL: every snapshot whole, in the driver, as before), and per split how many output
# partitions of its snapshot are delivered and how they were cut (kept on the snapshot's first
# split; NULL elsewhere).
_V7 = (
    *(
        f"ALTER TABLE {table} ADD COLUMN reconcile_partition_bytes BIGINT"
        for table in ("icetail_inflight_batches", "icetail_history")
    ),
    "ALTER TABLE icetail_inflight_splits ADD COLUMN parts_done INTEGER",
    "ALTER TABLE icetail_inflight_splits ADD COLUMN parts_key TEXT",
)


# Consumers `serve` stopped (a table failing --max-failures times while others deliver): why and
# since when, so `icetail status` names them from any process. Its own table, not columns of
# icetail_consumers: a consumer that failed before its first run created it has no row there.
# Removed when the consumer delivers again.
_V8 = (
    """
    CREATE TABLE icetail_stopped_consumers (
        consumer TEXT PRIMARY KEY,
        catalog_name TEXT NOT NULL,
        table_name TEXT NOT NULL,
        reason TEXT NOT NULL,
        stopped_at_ms BIGINT NOT NULL,
        updated_at_ms BIGINT NOT NULL
    )
    """,
)


# Net batches folded in partitions (reader/changes/net_shuffle.py) when their splits hold more than the
# batch's partition size: FALSE for a net batch written before, which a resumed run folds whole in
# the driver, as it began (its one chunk may be written already, under the first partition's key).
_V9 = tuple(
    f"ALTER TABLE {table} ADD COLUMN net_partitioned BOOLEAN NOT NULL DEFAULT FALSE"
    for table in ("icetail_inflight_batches", "icetail_history")
)


# `serve` replicas sharing one configuration (state/replicas.py): each registers here and keeps a
# heartbeat whose expiry is on the database clock, as a lease's is. `group` names the configuration
# (its consumers), so replicas of different configurations on one store do not share consumers out.
_V10 = (
    """
    CREATE TABLE icetail_replicas (
        replica TEXT PRIMARY KEY,
        group_key TEXT NOT NULL,
        host TEXT NOT NULL,
        pid BIGINT NOT NULL,
        started_at_ms BIGINT NOT NULL,
        heartbeat_at_ms BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    )
    """,
)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "consumers, in-flight batches and splits, history", _V1),
    Migration(2, "the sink of each consumer", _V2),
    Migration(3, "each batch's chunk size, ordinals and collapsed marker in typed columns", _V3, _backfill_v3),
    Migration(4, "the branch each consumer follows", _V4),
    Migration(5, "whether each batch delivers net changes", _V5),
    Migration(6, "the schema id each batch is projected onto", _V6),
    Migration(7, "partitioned reconciliation: each batch's partition size, each snapshot's delivered partitions", _V7),
    Migration(8, "consumers serve stopped, why and since when", _V8),
    Migration(9, "whether each net batch may be folded in partitions", _V9),
    Migration(10, "serve replicas and their heartbeats", _V10),
)
SUPPORTED_VERSIONS: tuple[int, ...] = tuple(m.version for m in MIGRATIONS)
LATEST_VERSION = SUPPORTED_VERSIONS[-1]


def no_icetail_state(where: str) -> str:
    """The refusal of `status`/`reset` (which never create a store) for a database without icetail's tables."""
    return (
        f"checkpoint store {where} holds no icetail state (no {META_TABLE} table); check --state, "
        "or create the store with `icetail run`"
    )


def parse_version(raw: str | None, where: str) -> int:
    """The stored schema version; 0 for a store that has none yet."""
    if raw is None:
        return 0
    try:
        version = int(raw)
    except ValueError:
        raise StateError(f"checkpoint store {where} has an unreadable schema version {raw!r}") from None
    if version < 0:
        raise StateError(f"checkpoint store {where} has an invalid schema version {version}")
    return version


def pending_migrations(current: int, where: str) -> tuple[Migration, ...]:
    """Migrations to apply, oldest first; StateError if the store is newer than this code."""
    if current > LATEST_VERSION:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        raise StateError(
            f"checkpoint store {where} has schema version {current}, but this icetail supports only "
            f"schema versions {supported}; upgrade icetail to a release that supports schema version {current}"
        )
    return tuple(m for m in MIGRATIONS if m.version > current)


def _check_order() -> None:
    """Versions must be 1, 2, 3, ...: a gap or a repeat is a bug in this file."""
    if SUPPORTED_VERSIONS != tuple(range(1, len(MIGRATIONS) + 1)):
        raise AssertionError(f"migration versions must be 1..n in order, got {SUPPORTED_VERSIONS}")


_check_order()
