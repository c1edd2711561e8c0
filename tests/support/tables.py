"""Source tables for pipeline tests: mixed snapshot kinds, or one big file of many row groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan
from pyiceberg.table import Table
from pyiceberg.types import StringType

from tests.support.catalogs import LocalCatalog

BASE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def make_rows(schema: pa.Schema, ids: Sequence[int], *, version: int = 0) -> pa.Table:
    ids = list(ids)
    columns: dict[str, list[Any]] = {
        "id": ids,
        "name": [f"name-{i}-v{version}" for i in ids],
        "amount": [round(i * 0.25 + version, 2) for i in ids],
    }
    for extra in (n for n in schema.names if n.startswith("note")):  # `note`, then the chaos writer's `note2`, ...
        columns[extra] = [None if i % 7 == 0 else f"{extra}-{i % 13}" for i in ids]
    return pa.table(columns, schema=schema)


def build_mixed_table(
    cat: LocalCatalog,
    ident: str,
    *,
    scale: int = 1,
    row_group_rows: int = 150,
    target_file_bytes: int = 24_000,
) -> Table:
    """~11 snapshots of mixed kinds; appends write several files of several row groups each.

    S1 append (several files), S2 append, S3 copy-on-write delete (rewrites a file: carry-overs),
    S4+S5 overwrite (pyiceberg: a delete snapshot then an append), schema change (add `note`),
    S6 append with `note`, S7 delete spanning several files, S8 append (several files),
    S9 delete of part of S8's rows, S10 a delete that matches nothing new plus S11 an append.
    """
    b = 400 * scale
    catalog = cat.catalog()
    namespace = ident.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    table = catalog.create_table(
        ident,
        schema=BASE_SCHEMA,
        properties={
            "write.parquet.row-group-limit": str(row_group_rows),
            "write.target-file-size-bytes": str(target_file_bytes * scale),
        },
    )
    table.append(make_rows(BASE_SCHEMA, range(3 * b)))  # S1
    table.append(make_rows(BASE_SCHEMA, range(3 * b, 4 * b + b // 2)))  # S2
    table.delete(LessThan("id", 40))  # S3
    lo, hi = b - 100, b - 70
    table.overwrite(  # S4 (delete) + S5 (append)
        make_rows(BASE_SCHEMA, range(lo, hi), version=1),
        overwrite_filter=And(GreaterThanOrEqual("id", lo), LessThan("id", hi)),
    )
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table = catalog.load_table(ident)
    schema = table.schema().as_arrow()
    table.append(make_rows(schema, range(5 * b, 5 * b + b // 4)))  # S6
    table.delete(In("id", [100, b + 300, 2 * b + 1, 3 * b + 5, 5 * b + 3]))  # S7
    table.append(make_rows(schema, range(6 * b, 8 * b)))  # S8
    table.delete(And(GreaterThanOrEqual("id", 6 * b + 10), LessThan("id", 6 * b + 30)))  # S9
    table.delete(EqualTo("id", 2 * b + 1))  # S10: already deleted, no snapshot or an empty one
    table.append(make_rows(schema, range(9 * b, 9 * b + 25)))  # S11
    return catalog.load_table(ident)


def build_big_file_table(cat: LocalCatalog, ident: str, *, rows: int, row_group_rows: int) -> Table:
    """One append of one data file of `rows` rows in row groups of `row_group_rows`."""
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists(ident.rsplit(".", 1)[0])
    table = catalog.create_table(
        ident,
        schema=BASE_SCHEMA,
        properties={
            "write.parquet.row-group-limit": str(row_group_rows),
            "write.target-file-size-bytes": str(1 << 30),
        },
    )
    table.append(make_rows(BASE_SCHEMA, range(rows)))
    return catalog.load_table(ident)


def data_file_layout(table: Table) -> list[tuple[str, int, int]]:
    """(path, rows, row groups) of the current snapshot's data files."""
    import pyarrow.parquet as pq

    out = []
    for task in table.scan().plan_files():
        path = task.file.file_path.removeprefix("file://")
        meta = pq.ParquetFile(path).metadata
        out.append((path, meta.num_rows, meta.num_row_groups))
    return out
