"""Read a parquet sink back as one table: every chunk under the newest schema, columns joined by field id.

A sink's files follow the source's schema changes (docs/sinks.md, "Schema changes"): a renamed
column has a new name in the newer files, a widened one a wider type, an added one is missing
from the older files. Reading the directory as a plain dataset unifies by name, so a rename
becomes two half-empty columns, or the newest file's schema silently drops columns. Here each
file's columns are matched by their Iceberg field id (`PARQUET:field_id`; icetail's changelog
columns by name), in delivery order:

* the newest file's schema wins: names, types and order;
* a column only older files have (dropped from the source) is kept, after the newest columns,
  NULL in the newer files' rows;
* a file without a column of the newest schema (added later) reads it as NULL;
* a widened type (int to long, float to double, a wider decimal) is cast.

Nested fields are matched by name inside a top-level column (a nested rename is not joined).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs

from icetail.kernel.errors import ConfigError, error_text
from icetail.sinks.files.object_store import committed_objects, object_filesystem
from icetail.sinks.files.parquet import SUFFIX

FIELD_ID = b"PARQUET:field_id"
ColumnKey = int | str  # a field id, or the name of a column without one (the changelog columns)


def read_parquet_sink(location: str | os.PathLike[str]) -> pa.Table:
    """Every committed change row of a parquet sink, in delivery order, under its newest schema.

    `location`: the sink's URL (`parquet:///DIR`, `parquet+s3://BUCKET/PREFIX`, `parquet+gs://`,
    `parquet+abfs://`) or a directory path. An empty sink reads as a table without columns.
    """
    files, filesystem = _committed_files(os.fspath(location))
    try:
        tables = [pq.read_table(path, filesystem=filesystem) for path in files]
    except OSError as exc:
        raise ConfigError(f"parquet sink {os.fspath(location)!r} cannot be read: {error_text(exc)}") from exc
    if not tables:
        return pa.table({})
    target = unified_schema([t.schema for t in tables])
    return pa.concat_tables([_conformed(t, target) for t in tables])


def unified_schema(schemas: list[pa.Schema]) -> pa.Schema:
    """The newest (last) schema's fields, then the fields only older schemas have, newest version first."""
    fields: dict[ColumnKey, pa.Field] = {column_key(f): f for f in schemas[-1]}
    for schema in reversed(schemas[:-1]):
        for field in schema:
            fields.setdefault(column_key(field), field.with_nullable(True))
    return pa.schema(list(fields.values()))


def column_key(field: pa.Field) -> ColumnKey:
    raw = (field.metadata or {}).get(FIELD_ID)
    return int(raw) if raw is not None else field.name


def _conformed(table: pa.Table, target: pa.Schema) -> pa.Table:
    by_key = {column_key(f): table.column(i) for i, f in enumerate(table.schema)}
    columns = []
    for field in target:
        column = by_key.get(column_key(field))
        if column is None:
            columns.append(pa.nulls(table.num_rows, field.type))
        elif column.type != field.type:
            columns.append(column.cast(field.type))
        else:
            columns.append(column)
    return pa.table(columns, schema=target)


def _committed_files(location: str) -> tuple[list[str], fs.FileSystem | None]:
    """The committed chunk files in delivery order, and the filesystem to read them with."""
    scheme, sep, rest = location.partition("://")
    if sep and scheme.startswith("parquet+"):
        return committed_objects(location), object_filesystem(scheme.removeprefix("parquet+"))
    if sep and scheme != "parquet":
        raise ConfigError(
            f"{location!r} is not a parquet sink; give parquet:///DIR, parquet+s3://BUCKET/PREFIX or a directory"
        )
    directory = Path(rest if sep else location)
    if not directory.is_dir():
        raise ConfigError(f"parquet sink directory {str(directory)!r} does not exist")
    # committed chunks only: `_tmp/` holds writes in progress, names sort in delivery order
    names = sorted(p.name for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(("_", ".")))
    return [str(directory / name) for name in names], None
