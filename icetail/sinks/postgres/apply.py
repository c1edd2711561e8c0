"""A group of chunks applied to the target in ONE transaction, recorded in icetail's ledger in it.

In order: the chunks' names are claimed in the ledger (a name already there was applied before a
crash lost its offset: that chunk is left out, whatever the checkpoint store says); the target's
schema is changed if the rows' schema asks for it; the net rows (the local merge of the chunks
left) are COPYed into a temporary staging table, or, into an empty target, straight into it; the
keys whose last change deletes are deleted (DELETE ... USING), the others upserted (INSERT ... ON
CONFLICT DO UPDATE); the ledger forgets the consumer's earlier batches (a finished batch is never
replayed). A crash anywhere before COMMIT leaves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import Connection, sql

from icetail.sinks.base import ChunkKey
from icetail.sinks.keyed.merge import DELETE, FRESH, UPSERT, NetChanges
from icetail.sinks.postgres.encode import copy_pieces
from icetail.sinks.postgres.types import Column

LEDGER_TABLE = "icetail_mirror_ledger"
STAGE = sql.Identifier("icetail_mirror_stage")
OP = "_icetail_op"


@dataclass(frozen=True)
class Applied:
    """What a group of chunks did to the target."""

    deleted: int = 0  # keys deleted (history: versions closed)
    upserted: int = 0  # rows inserted or updated (history: versions added)
    duplicates: int = 0  # inserts of a key the source already held (in the chunks, or found in the target)
    skipped: int = 0  # chunks found in the ledger: applied before (a replay), left alone


def ensure_ledger(conn: Connection[Any], schema: str) -> None:
    """icetail's ledger in `schema`, created when missing (its own transaction, at start); an existing
    one needs no CREATE privilege."""
    ledger = sql.Identifier(schema, LEDGER_TABLE)
    found = conn.execute("SELECT to_regclass(%s)", (ledger.as_string(conn),)).fetchone()
    if found is not None and found[0] is not None:
        return
    with conn.transaction():
        if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (consumer text NOT NULL, chunk text NOT NULL, batch_id text NOT NULL, "
                "target text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, chunk))"
            ).format(ledger)
        )


def apply_group(
    conn: Connection[Any],
    *,
    ledger_schema: str,
    target_name: str,
    chunks: Sequence[ChunkKey],
    ddl: Sequence[sql.Composed],
    body: Callable[[Connection[Any], list[int]], Applied],
    before_commit: Callable[[], None] = lambda: None,
) -> Applied:
    """Claim `chunks` (in delivery order, one batch) in the ledger, then run `ddl` and `body` on the
    positions of the chunks not applied before, all in one transaction; see the module doc.
    `before_commit` may raise to roll it all back (the lease's deadline passed meanwhile).

    Chunks already in the ledger are left out before anything is merged: a replayed group may be
    cut differently from the one that was applied, but applied chunks always form whole earlier
    groups, so what is left is a suffix of the group, still in commit order.
    """
    ledger = sql.Identifier(ledger_schema, LEDGER_TABLE)
    claim = sql.SQL(
        "INSERT INTO {} (consumer, chunk, batch_id, target) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
    ).format(ledger)
    with conn.transaction():
        claimed = [
            i
            for i, chunk in enumerate(chunks)
            if conn.execute(claim, (chunk.consumer, chunk.name, chunk.batch_id, target_name)).rowcount
        ]
        if not claimed:
            return Applied(skipped=len(chunks))
        for statement in ddl:
            conn.execute(statement)
        applied = body(conn, claimed)
        batches = sorted({c.batch_id for c in chunks})
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE consumer = %s AND NOT batch_id = ANY(%s)").format(ledger),
            (chunks[0].consumer, batches),
        )
        before_commit()
    return replace(applied, skipped=len(chunks) - len(claimed))


def apply_mirror(
    conn: Connection[Any], target: sql.Identifier, net: NetChanges, columns: Sequence[Column], key: Sequence[str]
) -> Applied:
    """The mirror's body: the net rows' keys deleted or upserted."""
    if not net.rows.num_rows:
        return Applied()
    applied = _apply(conn, target, net, columns, key)
    return replace(applied, duplicates=applied.duplicates + net.duplicates)


def stage(
    conn: Connection[Any], target: sql.Identifier, columns: Sequence[Column], rows: pa.Table, ops: pa.Array
) -> None:
    """`rows` (their `columns`, then `ops`) in a temporary table shaped as `target`'s columns, dropped at commit."""
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    conn.execute(
        sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
            STAGE, names, target
        )
    )
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} text").format(STAGE, sql.Identifier(OP)))
    with conn.cursor() as cur:
        copy = sql.SQL("COPY {} ({}, {}) FROM STDIN (FORMAT csv)").format(STAGE, names, sql.Identifier(OP))
        with cur.copy(copy) as writer:
            for piece in copy_pieces(rows, columns, [ops]):
                writer.write(piece)


def _apply(
    conn: Connection[Any], target: sql.Identifier, net: NetChanges, columns: Sequence[Column], key: Sequence[str]
) -> Applied:
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    empty = conn.execute(sql.SQL("SELECT NOT EXISTS (SELECT FROM {})").format(target)).fetchone()
    if empty is not None and empty[0]:
        return _load_empty(conn, target, net, columns, names)
    stage(conn, target, columns, net.rows, net.ops)
    matches = sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in key)
    deleted = conn.execute(
        sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} = %s AND {}").format(
            target, STAGE, sql.Identifier(OP), matches
        ),
        (DELETE,),
    ).rowcount
    fresh, found = _upsert(conn, target, columns, key, FRESH)
    upserted, _ = _upsert(conn, target, columns, key, UPSERT)
    return Applied(deleted, fresh + upserted, found)


def _load_empty(
    conn: Connection[Any], target: sql.Identifier, net: NetChanges, columns: Sequence[Column], names: sql.Composed
) -> Applied:
    """Into an empty target (a first load, `--start full`) the net rows go by COPY alone: there is
    nothing to delete or conflict with, and the merge left one row per key."""
    keep = pc.not_equal(net.ops, DELETE)
    rows = net.rows.filter(keep)
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, names)) as writer:
            for piece in copy_pieces(rows, columns):
                writer.write(piece)
    return Applied(0, rows.num_rows, 0)


def _upsert(
    conn: Connection[Any], target: sql.Identifier, columns: Sequence[Column], key: Sequence[str], op: str
) -> tuple[int, int]:
    """Upsert the staged rows of `op`: (rows written, rows whose key the target held already)."""
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    others = [c.name for c in columns if c.name not in key]
    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    if others:
        sets = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others)
        action = sql.SQL("DO UPDATE SET {}").format(sets)
    else:
        action = sql.Composed([sql.SQL("DO NOTHING")])
    # xmax is 0 on a freshly inserted row and set on a row ON CONFLICT updated
    statement = sql.SQL(
        "WITH written AS (INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} = %s ON CONFLICT ({}) {} "
        "RETURNING xmax::text <> '0' AS existed) "
        "SELECT count(*), count(*) FILTER (WHERE existed), (SELECT count(*) FROM {} WHERE {} = %s) FROM written"
    ).format(target, names, names, STAGE, sql.Identifier(OP), keys, action, STAGE, sql.Identifier(OP))
    row = conn.execute(statement, (op, op)).fetchone()
    assert row is not None
    written, existed, staged = (int(v) for v in row)
    return (written, existed) if others else (staged, staged - written)
