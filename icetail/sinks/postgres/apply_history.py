"""A chunk's versions applied to a history table (the body of apply.apply_chunk, in its transaction).

Staged like the mirror's net rows, then: a version the chunk's first snapshot of a key already
made (the source held the key twice in one snapshot, split over chunks) is replaced; the key's
open version is closed at the chunk's first snapshot of it; the new versions are inserted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection, sql

from icetail.sinks.keyed import history_versions as versions
from icetail.sinks.postgres.apply import OP, STAGE, Applied, stage
from icetail.sinks.postgres.types import Column


def apply_history(
    conn: Connection[Any],
    target: sql.Identifier,
    changes: versions.VersionChanges,
    columns: Sequence[Column],
    key: Sequence[str],
) -> Applied:
    if not changes.rows.num_rows:
        return Applied()
    stage(conn, target, columns, changes.rows, changes.ops)
    op = sql.Identifier(OP)
    matches = sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in key)
    from_id, to_id = sql.Identifier(versions.VALID_FROM_SNAPSHOT_ID), sql.Identifier(versions.VALID_TO_SNAPSHOT_ID)
    from_time, to_time = sql.Identifier(versions.VALID_FROM), sql.Identifier(versions.VALID_TO)
    closing = (versions.CLOSE, versions.CLOSE_FRESH)
    replaced = conn.execute(
        sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} IN (%s, %s) AND {} AND t.{} = s.{}").format(
            target, STAGE, op, matches, from_id, from_id
        ),
        closing,
    ).rowcount
    closed = conn.execute(
        sql.SQL(
            "WITH closed AS (UPDATE {} AS t SET {} = s.{}, {} = s.{} FROM {} AS s "
            "WHERE s.{} IN (%s, %s) AND {} AND t.{} IS NULL RETURNING s.{} AS op) "
            "SELECT count(*), count(*) FILTER (WHERE op = %s) FROM closed"
        ).format(target, to_id, from_id, to_time, from_time, STAGE, op, matches, to_id, op),
        (*closing, versions.CLOSE_FRESH),
    ).fetchone()
    assert closed is not None
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    added = conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE {} = %s").format(target, names, names, STAGE, op),
        (versions.VERSION,),
    ).rowcount
    return Applied(int(closed[0]), added, changes.duplicates + replaced + int(closed[1]))
