"""The target table: read from PostgreSQL's catalog, created, checked and evolved by field id.

Each column icetail manages says which source field it holds in its comment
(`icetail:field-id=N`), so the target follows the source by field id, as the Iceberg sink does:
a new field is added, a renamed one renamed, a widened one widened, a dropped one dropped. A
table created by someone else (no such comments) is adopted only when it matches the source by
name (columns, types, primary key), and its columns get the comments. Anything else is refused
with one line naming the table and what differs. The statements run in the caller's
transaction: a schema change commits with the first chunk of its schema, or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Connection, sql

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.postgres.types import Column, widens

_COMMENT = re.compile(r"icetail:field-id=(-?\d+)")


@dataclass(frozen=True)
class Existing:
    """A target table as PostgreSQL has it."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]  # the primary key's columns, in order

    @property
    def managed(self) -> bool:
        return any(c.field_id is not None for c in self.columns)


def qualified(schema: str, table: str) -> sql.Identifier:
    return sql.Identifier(schema, table)


def schema_exists(conn: Connection[Any], schema: str) -> bool:
    """Whether `schema` exists (CREATE SCHEMA IF NOT EXISTS would need a privilege even when it does)."""
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def read_existing(conn: Connection[Any], schema: str, table: str) -> Existing | None:
    """The table's columns (type, field id) and primary key; None when it does not exist."""
    name = qualified(schema, table).as_string(conn)
    oid = conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
    if oid is None or oid[0] is None:
        return None
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod), col_description(attrelid, attnum) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid[0],),
    ).fetchall()
    key = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)",
        (oid[0],),
    ).fetchall()
    columns = tuple(Column(n, t, _field_id(comment)) for n, t, comment in rows)
    return Existing(columns, tuple(k for (k,) in key))


def changes(
    existing: Existing | None,
    wanted: Sequence[Column],
    key: Sequence[str],
    schema: str,
    table: str,
    *,
    keep_dropped: bool = False,
    create_schema: bool = False,
) -> list[sql.Composed]:
    """The DDL that makes the target hold `wanted` with primary key `key`; SinkRejectedError when it cannot.

    Columns of `wanted` without a field id are icetail's own (a history table's validity columns):
    matched by name. `keep_dropped`: a column the source dropped stays (a history table keeps the
    values of its old versions; later versions hold NULL there). `create_schema`: a missing target
    is created in a schema that does not exist yet (created too)."""
    target = qualified(schema, table)
    where = f"target table {target.as_string(None)}"
    if existing is None:
        made = _create_schema(schema) if create_schema else []
        return [*made, _create(target, wanted, key), *_comments(schema, table, wanted)]
    if not existing.managed:
        _check_by_name(existing, wanted, key, where)
        return _comments(schema, table, wanted)
    by_id: dict[int | None, Column] = {c.field_id: c for c in existing.columns if c.field_id is not None}
    wanted_ids = {c.field_id for c in wanted}
    _check_key(existing, wanted, key, where)
    statements: list[sql.Composed] = []
    alter = sql.SQL("ALTER TABLE {} ").format(target)
    own = {c.name for c in wanted if c.field_id is None}
    have = {c.name for c in existing.columns}
    for old in existing.columns:
        if old.field_id is None and old.name not in own:
            raise SinkRejectedError(f"{where} has column {old.name!r}, which holds no source field; drop it")
        if old.field_id is not None and old.field_id not in wanted_ids and not keep_dropped:
            statements.append(alter + sql.SQL("DROP COLUMN {}").format(sql.Identifier(old.name)))
    for column in wanted:
        if column.field_id is None:
            if column.name not in have:
                raise SinkRejectedError(f"{where} has no column {column.name!r} ({column.pg_type})")
            continue
        old_column = by_id.get(column.field_id)
        if old_column is None:
            statements.append(alter + sql.SQL("ADD COLUMN {} {}").format(_ident(column), sql.SQL(column.pg_type)))
            statements += _comments(schema, table, [column])
            continue
        if old_column.name != column.name:
            statements.append(
                alter + sql.SQL("RENAME COLUMN {} TO {}").format(sql.Identifier(old_column.name), _ident(column))
            )
        if old_column.pg_type != column.pg_type:
            if not widens(old_column.pg_type, column.pg_type):
                raise SinkRejectedError(
                    f"{where}: column {old_column.name!r} is {old_column.pg_type}, the source's is {column.pg_type}, "
                    "which is not a widening; recreate the target or follow another"
                )
            statements.append(
                alter + sql.SQL("ALTER COLUMN {} TYPE {}").format(_ident(column), sql.SQL(column.pg_type))
            )
    return statements


def _check_key(existing: Existing, wanted: Sequence[Column], key: Sequence[str], where: str) -> None:
    ids = {c.name: c.field_id or c.name for c in existing.columns}
    wanted_ids = {c.name: c.field_id or c.name for c in wanted}
    if [ids.get(k) for k in existing.key] != [wanted_ids.get(k) for k in key]:
        raise SinkRejectedError(
            f"{where} has primary key ({', '.join(existing.key) or 'none'}), but the mirror key is "
            f"({', '.join(key)}); give the key with --identifier-columns, or mirror into another table"
        )


def _check_by_name(existing: Existing, wanted: Sequence[Column], key: Sequence[str], where: str) -> None:
    have = {c.name: c.pg_type for c in existing.columns}
    want = {c.name: c.pg_type for c in wanted}
    for name, pg_type in want.items():
        if name not in have:
            raise SinkRejectedError(f"{where} has no column {name!r} ({pg_type}) of the source")
        if have[name] != pg_type:
            raise SinkRejectedError(f"{where}: column {name!r} is {have[name]}, the source's is {pg_type}")
    extra = [n for n in have if n not in want]
    if extra:
        raise SinkRejectedError(f"{where} has column(s) {', '.join(map(repr, extra))} the source does not have")
    if tuple(existing.key) != tuple(key):
        raise SinkRejectedError(
            f"{where} has primary key ({', '.join(existing.key) or 'none'}), but the mirror key is "
            f"({', '.join(key)}); give the key with --identifier-columns, or mirror into another table"
        )


def _create_schema(schema: str) -> list[sql.Composed]:
    return [sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))]


def _create(target: sql.Identifier, wanted: Sequence[Column], key: Sequence[str]) -> sql.Composed:
    columns = [
        sql.SQL("{} {}{}").format(_ident(c), sql.SQL(c.pg_type), sql.SQL(" NOT NULL" if c.name in key else ""))
        for c in wanted
    ]
    primary = sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, key)))
    return sql.SQL("CREATE TABLE {} ({})").format(target, sql.SQL(", ").join([*columns, primary]))


def _comments(schema: str, table: str, columns: Sequence[Column]) -> list[sql.Composed]:
    return [
        sql.SQL("COMMENT ON COLUMN {} IS {}").format(
            sql.Identifier(schema, table, c.name), sql.Literal(f"icetail:field-id={c.field_id}")
        )
        for c in columns
        if c.field_id is not None
    ]


def _ident(column: Column) -> sql.Identifier:
    return sql.Identifier(column.name)


def _field_id(comment: str | None) -> int | None:
    match = _COMMENT.search(comment or "")
    return int(match.group(1)) if match else None
