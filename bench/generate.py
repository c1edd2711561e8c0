"""Seeded benchmark data: parquet data files, the tables that reference them, deletes, histories.

Everything is a function of (scale, seed): file `i` is drawn from `numpy.random.default_rng([seed, i])`,
so a rerun (or another machine) writes byte-identical values. Data files are written once per
(scale, seed) under `<workdir>/data/<key>/` with pyarrow (zstd, `row_group_rows` per row group,
Iceberg field ids in the parquet schema) and then registered, unchanged, in as many tables as
the cases need (pyiceberg `add_files`); files are never rewritten in place, so sharing them
between tables is safe. Deletes are written by the Java reference (Spark SQL `DELETE` for
position deletes and deletion vectors, the Iceberg Java API over py4j for equality deletes).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# The table schema (Spark SQL types); field ids are 1..n in this order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("ts", "timestamp"),
    ("k", "int"),
    ("amount", "double"),
    ("name", "string"),
    ("category", "string"),
    ("flag", "boolean"),
    ("day", "date"),
)
CATEGORIES = tuple(f"category-{i:02d}" for i in range(50))
BASE_TS_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


@dataclass(frozen=True)
class Scale:
    """Sizes of one run; every field can be overridden from the command line."""

    name: str
    rows: int  # rows of the main data set
    files: int  # data files of the main data set
    row_group_rows: int  # rows per parquet row group
    files_per_snapshot: int  # the main data set is added in files / files_per_snapshot snapshots
    big_file_row_groups: int  # recovery case: row groups of the one large file
    history: tuple[int, ...]  # planning case: snapshots of history
    history_entries: int  # planning case: data files (manifest entries) in each history table
    new_snapshot_files: int  # planning case: files of the one new snapshot
    cow_files: int  # copy-on-write case: data files rewritten
    serve_commits: int  # serve case: appends committed
    repeat: int  # timed repetitions of each read (the best is reported)

    @property
    def rows_per_file(self) -> int:
        return self.rows // self.files


SCALES: dict[str, Scale] = {
    # the smoke test's size: seconds
    "tiny": Scale("tiny", 40_000, 4, 10_000, 2, 3, (3, 6), 40, 2, 1, 2, 1),
    # a couple of minutes
    "small": Scale("small", 2_000_000, 20, 100_000, 5, 8, (10, 100, 1000), 2000, 5, 2, 20, 3),
    # the default: 20M rows in 200 files of 100k-row row groups
    "default": Scale("default", 20_000_000, 200, 100_000, 20, 20, (10, 100, 1000), 5000, 5, 10, 30, 2),
}


def scale_with(base: Scale, **overrides: Any) -> Scale:
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


def iceberg_schema() -> Any:
    """The pyiceberg Schema of every benchmark table (all columns optional, ids 1..n)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DateType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    types = {
        "bigint": LongType(),
        "timestamp": TimestamptzType(),
        "int": IntegerType(),
        "double": DoubleType(),
        "string": StringType(),
        "boolean": BooleanType(),
        "date": DateType(),
    }
    return Schema(*[NestedField(i + 1, name, types[kind], required=False) for i, (name, kind) in enumerate(COLUMNS)])


def arrow_schema() -> pa.Schema:
    """The parquet schema of the data files, with `PARQUET:field_id` on each column."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(iceberg_schema())


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


def _rows(schema: pa.Schema, seed: int, index: int, first_id: int, n: int) -> pa.Table:
    rng = np.random.default_rng([seed, index])
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    ts = BASE_TS_US + ids * 1_000_000 + rng.integers(0, 1_000_000, n)
    amount = np.round(rng.normal(100.0, 50.0, n), 2)
    amount_null = rng.random(n) < 0.05
    names = pc.binary_join_element_wise("user-", pa.array(rng.integers(0, 10_000_000, n)).cast(pa.string()), "")
    name_null = rng.random(n) < 0.05
    categories = np.array(CATEGORIES)[rng.integers(0, len(CATEGORIES), n)]
    columns = [
        pa.array(ids),
        pa.array(ts).cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
        pa.array(rng.integers(0, 1_000_000, n, dtype=np.int32)),
        pa.array(amount, mask=amount_null),
        pc.if_else(pa.array(name_null), pa.scalar(None, pa.string()), names),
        pa.array(categories, pa.string()),
        pa.array(rng.random(n) < 0.5),
        pa.array((ts // 86_400_000_000).astype(np.int32)).cast(pa.date32()),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def write_file(path: Path, seed: int, index: int, first_id: int, n: int, row_group_rows: int) -> None:
    schema = arrow_schema()
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(str(tmp), schema, compression="zstd") as writer:
        done = 0
        while done < n:  # generate one row group at a time: memory stays flat
            m = min(row_group_rows, n - done)
            writer.write_table(_rows(schema, seed, index * 100_003 + done, first_id + done, m), row_group_size=m)
            done += m
    os.replace(tmp, path)


@dataclass(frozen=True)
class DataSet:
    """The generated files: the main set (ids 0..rows-1) and the recovery case's one big file."""

    directory: Path
    files: tuple[str, ...]  # file:// URIs, in id order
    rows_per_file: tuple[int, ...]
    big_file: str
    big_file_rows: int
    seconds: float  # generation time (0 when reused)


def data_key(scale: Scale, seed: int) -> str:
    shape = (scale.rows, scale.files, scale.row_group_rows, scale.big_file_row_groups, seed, "v1")
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]


def generate(workdir: Path, scale: Scale, seed: int, log: Any = print) -> DataSet:
    """Write (or reuse) the data files of `scale`."""
    directory = (workdir / "data" / f"{scale.name}-{data_key(scale, seed)}").resolve()
    marker = directory / "done.json"
    counts = [scale.rows_per_file] * scale.files
    counts[-1] += scale.rows - sum(counts)
    paths = [directory / f"part-{i:05d}.parquet" for i in range(scale.files)]
    big = directory / "big-00000.parquet"
    big_rows = scale.big_file_row_groups * scale.row_group_rows
    started = time.perf_counter()
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        log(f"generating {scale.rows:,} rows in {scale.files} files under {directory} (seed {seed})")
        first = 0
        for i, (path, n) in enumerate(zip(paths, counts, strict=True)):
            write_file(path, seed, i, first, n, scale.row_group_rows)
            first += n
        write_file(big, seed, 10_000_000, scale.rows, big_rows, scale.row_group_rows)
        marker.write_text(json.dumps({"scale": asdict(scale), "seed": seed}, indent=1))
        seconds = time.perf_counter() - started
        log(f"generated in {seconds:.1f}s")
    else:
        seconds = 0.0
        log(f"reusing data files under {directory}")
    return DataSet(directory, tuple(f"file://{p}" for p in paths), tuple(counts), f"file://{big}", big_rows, seconds)


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def table_properties(format_version: int = 2, mode: str = "merge-on-read") -> dict[str, str]:
    props = {"format-version": str(format_version)}
    for op in ("delete", "update", "merge"):
        props[f"write.{op}.mode"] = mode
    return props


@dataclass(frozen=True)
class PyicebergTables:
    """The few JavaCatalog methods this module uses (`pyiceberg`, `ident`, `load_table`), on a
    pyiceberg catalog alone: for cases that need no Java writer. Tables live in namespace `ns`."""

    pyiceberg: Any

    def ident(self, name: str) -> str:
        return f"ns.{name}"

    def load_table(self, name: str) -> Any:
        return self.pyiceberg.load_table(self.ident(name))


def create_table(catalog: Any, name: str, *, format_version: int = 2, mode: str = "merge-on-read") -> Any:
    """A fresh (empty) table `ns.<name>` of the benchmark schema; returns the pyiceberg Table."""
    ident = catalog.ident(name)
    py = catalog.pyiceberg
    if py.table_exists(ident):
        py.drop_table(ident)
    return py.create_table(ident, iceberg_schema(), properties=table_properties(format_version, mode))


def add_files(catalog: Any, name: str, files: list[str] | tuple[str, ...]) -> int:
    """One append snapshot adding `files` (pyiceberg add_files); returns its snapshot id."""
    table = catalog.load_table(name)
    table.add_files(list(files), check_duplicate_files=False)
    snapshot = catalog.load_table(name).current_snapshot()
    assert snapshot is not None
    return int(snapshot.snapshot_id)


def seed_snapshot(catalog: Any, name: str, data: DataSet) -> int:
    """A first, tiny snapshot (so the measured snapshots have a parent: Java's incremental read needs one)."""
    seed_path = data.directory / "seed.parquet"
    if not seed_path.exists():
        write_file(seed_path, 0, 99_999_999, -1000, 10, 10)
    return add_files(catalog, name, [f"file://{seed_path}"])


def load_files(catalog: Any, name: str, files: tuple[str, ...], files_per_snapshot: int) -> list[int]:
    """Add `files` in snapshots of `files_per_snapshot`; returns the snapshot ids."""
    return [
        add_files(catalog, name, files[i : i + files_per_snapshot]) for i in range(0, len(files), files_per_snapshot)
    ]


def upgrade_to_v3(catalog: Any, name: str) -> None:
    catalog.sql(f"ALTER TABLE {catalog.fq(name)} SET TBLPROPERTIES ('format-version'='3')")


def spark_delete(catalog: Any, name: str, predicate: str) -> int:
    """Spark SQL DELETE (merge-on-read or copy-on-write per table properties); the new snapshot id."""
    catalog.sql(f"DELETE FROM {catalog.fq(name)} WHERE {predicate}").collect()
    snapshot_id = catalog.current_snapshot_id(name)
    assert snapshot_id is not None
    return int(snapshot_id)


def commit_equality_deletes(catalog: Any, name: str, ids: np.ndarray, tag: str = "eq") -> int:
    """Write one equality-delete file on `id` with pyarrow and commit it with the Java API (RowDelta)."""
    table = catalog.load_table(name)
    location = local_path(table.location())
    path = Path(location) / "data" / f"{tag}-deletes-{len(ids)}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    field = arrow_schema().field("id")
    pq.write_table(pa.table([pa.array(ids, pa.int64())], schema=pa.schema([field])), str(path), compression="zstd")
    spark = catalog.spark
    jvm = spark._jvm
    jtable = catalog.java_table(name)
    field_ids = spark.sparkContext._gateway.new_array(jvm.int, 1)
    field_ids[0] = 1
    delete = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(jtable.spec())
        .ofEqualityDeletes(field_ids)
        .withPath(f"file://{path}")
        .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
        .withFileSizeInBytes(path.stat().st_size)
        .withRecordCount(len(ids))
        .build()
    )
    jtable.newRowDelta().addDeletes(delete).commit()
    snapshot_id = catalog.current_snapshot_id(name)
    assert snapshot_id is not None
    return int(snapshot_id)


# --------------------------------------------------------------------------------------------
# Planning histories (metadata only: the data files named do not exist, planning never opens them)
# --------------------------------------------------------------------------------------------


def _fake_data_file(path: str, rows: int) -> Any:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=rows * 40,
        column_sizes={1: rows * 8},
        value_counts={1: rows},
        null_value_counts={1: 0},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        split_offsets=[4],
        sort_order_id=None,
        spec_id=0,
        equality_ids=None,
        key_metadata=None,
    )


def fast_append_fake(table: Any, paths: list[str], rows: int = 100_000) -> None:
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for path in paths:
                append.append_data_file(_fake_data_file(path, rows))


def build_history(catalog: Any, name: str, snapshots: int, entries: int, log: Any = print) -> Any:
    """A table with `snapshots` fast-append snapshots holding `entries` data files in all.

    Committed with the Java API over py4j (`newFastAppend`, one manifest per snapshot, never
    merged: the manifest list of snapshot N has N entries, the worst case for planning);
    pyiceberg's commit is quadratic enough in the history length to take minutes at 1000.
    Returns the pyiceberg Table; the caller then commits the one new snapshot it plans.
    """
    table = create_table(catalog, name)
    per = [entries // snapshots] * snapshots
    for i in range(entries - sum(per)):
        per[i] += 1
    location = local_path(table.location())
    jvm = catalog.spark._jvm
    jtable = catalog.java_table(name)
    spec = jtable.spec()
    parquet = jvm.org.apache.iceberg.FileFormat.PARQUET
    started = time.perf_counter()
    for s, count in enumerate(per):
        append = jtable.newFastAppend()
        for j in range(max(count, 1)):
            data_file = (
                jvm.org.apache.iceberg.DataFiles.builder(spec)
                .withPath(f"file://{location}/data/h{s:05d}-{j:05d}.parquet")
                .withFormat(parquet)
                .withFileSizeInBytes(4_000_000)
                .withRecordCount(100_000)
                .build()
            )
            append.appendFile(data_file)
        append.commit()
        if (s + 1) % 250 == 0:
            log(f"  {name}: {s + 1}/{snapshots} snapshots ({time.perf_counter() - started:.0f}s)")
    return catalog.load_table(name)
