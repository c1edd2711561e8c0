"""The Java Iceberg reference (iceberg-spark-runtime 1.10.2 on Spark 3.5) as a test oracle.

One SparkSession per test process (`build_spark_session`), with Iceberg catalogs added at run
time: every test gets its own SQLite catalog file and warehouse directory (`new_catalog`). Java
(Spark SQL and the Iceberg Java API over py4j) writes the tables; pyiceberg's `SqlCatalog` reads
the very same catalog file, because Iceberg's `JdbcCatalog` (schema version V1) and pyiceberg's
`SqlCatalog` share the `iceberg_tables` / `iceberg_namespace_properties` layout. The catalog name is
part of every row (`catalog_name`), so both sides use the same name.

Spark configuration that matters (found the hard way):

* `spark.jars`: iceberg-spark-runtime (it already contains the SQL extensions, the stored
  procedures and the JDBC catalog; the separate iceberg-spark-extensions jar of the same wheel
  is a second build of a subset of the same classes and is left out), the relocated Jackson of
  `shade_jackson.py` (the wheel stripped Iceberg's shaded Jackson), and Debian's sqlite-jdbc.
* `spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions`
  (MERGE/UPDATE/DELETE row-level plans, CALL, ALTER ... PARTITION FIELD) - fixed at session start.
* per catalog: `type=jdbc`, `uri=jdbc:sqlite:<file>`, `warehouse=file://<dir>`,
  `jdbc.schema-version=V1` and `cache-enabled=false` (the Java API commits behind Spark's back,
  so Spark must not serve a cached table).
* catalog names are lowercase letters and digits only: pyiceberg turns `_` in
  `PYICEBERG_CATALOG__<NAME>__URI` into `-`, and lowercases the name.
"""

from __future__ import annotations

import glob
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from icetail.reader.spark.session import PURGE_DELAY_ENV, WORKER_PURGE_DELAY_MS
from tests.support.shade_jackson import shaded_jackson_jar


def _pyspark_major() -> int:
    from importlib.metadata import version

    return int(version("pyspark").split(".")[0])


ICEBERG_VERSION = "1.10.2"
# iceberg-spark-runtime-3.5 is built for Spark 3.5 (Scala 2.12): on Spark 4 it cannot load
JAVA_REFERENCE_RUNS = _pyspark_major() == 3
SCALA_SUFFIX = "2.12"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
SQLITE_JDBC_CANDIDATES = ("/usr/share/java/sqlite-jdbc.jar", "/usr/share/java/xerial-sqlite-jdbc.jar")
DEFAULT_NAMESPACE = "ns"

_catalog_counter = itertools.count(1)


# --------------------------------------------------------------------------------------------
# Jars and the session
# --------------------------------------------------------------------------------------------


def iceberg_runtime_jar() -> Path:
    import snowpark_connect_deps_iceberg

    base = Path(snowpark_connect_deps_iceberg.__file__).resolve().parent / "jars"
    jar = base / f"iceberg-spark-runtime-3.5_{SCALA_SUFFIX}-{ICEBERG_VERSION}.jar"
    if not jar.exists():
        raise FileNotFoundError(f"{jar} missing (pip install snowpark-connect-deps-iceberg==1.0.3)")
    return jar


def sqlite_jdbc_jar() -> Path:
    for candidate in SQLITE_JDBC_CANDIDATES:
        if os.path.exists(candidate):
            return Path(candidate)
    found = sorted(glob.glob("/usr/share/java/*sqlite-jdbc*.jar"))
    if found:
        return Path(found[0])
    raise FileNotFoundError("sqlite-jdbc jar not found (apt-get install libxerial-sqlite-jdbc-java)")


def spark_jars() -> list[Path]:
    return [iceberg_runtime_jar(), shaded_jackson_jar(), sqlite_jdbc_jar()]


def spark_conf() -> dict[str, str]:
    """The session-wide configuration (nothing catalog- or reader-specific)."""
    return {
        "spark.master": "local[2]",
        "spark.app.name": "icetail-tests",
        "spark.jars": ",".join(str(p) for p in spark_jars()),
        "spark.sql.extensions": EXTENSIONS,
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        # C1 only: the tests run many short Spark jobs on 2 cores, where C2 compilation costs more
        # than it saves (a workload of 8 snapshots: ~18 s instead of ~43 s under load)
        "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -XX:TieredStopAtLevel=1",
        # icetail's worker daemon, as reader.spark.spark_session sets it for a local master
        "spark.python.daemon.module": "icetail.reader.spark.daemon",
        # and its workers' allocator setting, as spark_session sets it (unless the environment does)
        **({} if PURGE_DELAY_ENV in os.environ else {f"spark.executorEnv.{PURGE_DELAY_ENV}": WORKER_PURGE_DELAY_MS}),
    }


def build_spark_session() -> Any:
    """The test session; replaces an already running session that lacks the Iceberg jars."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    conf = spark_conf()
    active = SparkContext._active_spark_context
    if active is not None:
        existing = active.getConf().get("spark.jars", "") or ""
        if str(iceberg_runtime_jar()) not in existing or EXTENSIONS not in (
            active.getConf().get("spark.sql.extensions", "") or ""
        ):
            SparkSession.builder.getOrCreate().stop()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --------------------------------------------------------------------------------------------
# One catalog per test
# --------------------------------------------------------------------------------------------


@dataclass
class SnapshotRows:
    """What the Java reader returns for `VERSION AS OF snapshot_id`.

    `table` has the columns of that snapshot's schema under that schema's names, each Arrow
    field carrying `PARQUET:field_id`; `field_ids` maps field id -> column name.
    """

    snapshot_id: int
    schema_id: int
    table: pa.Table
    field_ids: dict[int, str]
    schema: Any  # pyiceberg.schema.Schema


@dataclass
class JavaCatalog:
    name: str
    spark: Any
    pyiceberg: Any  # pyiceberg.catalog.sql.SqlCatalog
    db_path: Path
    warehouse_path: Path
    namespace: str = DEFAULT_NAMESPACE
    _rows_cache: dict[tuple[str, int], SnapshotRows] = field(default_factory=dict, repr=False)

    # -- naming -----------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.db_path}"

    @property
    def warehouse(self) -> str:
        return f"file://{self.warehouse_path}"

    def ident(self, table: str) -> str:
        """`ns.t` for a bare table name; identifiers with a namespace pass through."""
        return table if "." in table else f"{self.namespace}.{table}"

    def fq(self, ident: str) -> str:
        """Spark's fully qualified name, `<catalog>.ns.t`."""
        return f"{self.name}.{self.ident(ident)}"

    def env(self) -> dict[str, str]:
        """PYICEBERG_CATALOG__<NAME>__{TYPE,URI,WAREHOUSE} for resolving this catalog by name.

        For a subprocess (the icetail CLI): `subprocess.run(..., env={**os.environ, **catalog.env()})`.
        In-process, `set_env(monkeypatch)`: icetail's `icetail.monitor.engine.catalog.open_catalog` reads the
        variables at call time, but pyiceberg's own `load_catalog(name)` without properties uses a
        copy taken when `pyiceberg.catalog` was imported and will not see them.
        """
        key = self.name.upper()
        return {
            f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
            f"PYICEBERG_CATALOG__{key}__URI": self.uri,
            f"PYICEBERG_CATALOG__{key}__WAREHOUSE": self.warehouse,
        }

    def set_env(self, monkeypatch: Any) -> None:
        """Set `env()` in this process for the duration of the test (pytest's monkeypatch)."""
        for key, value in self.env().items():
            monkeypatch.setenv(key, value)

    def properties(self) -> dict[str, str]:
        return {"type": "sql", "uri": self.uri, "warehouse": self.warehouse}

    # -- Spark SQL --------------------------------------------------------------------------

    def sql(self, stmt: str) -> Any:
        """`spark.sql` with `{cat}` replaced by this catalog's name; returns the DataFrame."""
        return self.spark.sql(stmt.replace("{cat}", self.name))

    def rows(self, stmt: str) -> list[Any]:
        return self.sql(stmt).collect()

    # -- tables -----------------------------------------------------------------------------

    def load_table(self, ident: str) -> Any:
        """Freshly loaded pyiceberg Table."""
        return self.pyiceberg.load_table(self.ident(ident))

    def java_table(self, ident: str) -> Any:
        """The Java `org.apache.iceberg.Table` (py4j proxy), freshly loaded."""
        jvm = self.spark._jvm
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.spark._jsparkSession, self.fq(ident))

    def snapshots(self, ident: str) -> list[Any]:
        """Ancestry of the current snapshot, oldest first (pyiceberg `Snapshot` objects)."""
        tbl = self.load_table(ident)
        current = tbl.current_snapshot()
        chain = []
        while current is not None:
            chain.append(current)
            current = tbl.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
        return list(reversed(chain))

    def snapshot_ids(self, ident: str) -> list[int]:
        return [s.snapshot_id for s in self.snapshots(ident)]

    def current_snapshot_id(self, ident: str) -> int | None:
        snap = self.load_table(ident).current_snapshot()
        return snap.snapshot_id if snap is not None else None

    def snapshot_rows(self, ident: str, snapshot_id: int) -> SnapshotRows:
        """Rows the Java reader returns at `snapshot_id` (VERSION AS OF, that snapshot's schema)."""
        tbl = self.load_table(ident)
        key = (str(tbl.metadata.table_uuid), snapshot_id)
        cached = self._rows_cache.get(key)
        if cached is not None:
            return cached
        snap = tbl.snapshot_by_id(snapshot_id)
        if snap is None:
            raise KeyError(f"snapshot {snapshot_id} not in {ident}")
        schema = tbl.schemas()[snap.schema_id] if snap.schema_id is not None else tbl.schema()
        df = self.spark.sql(f"SELECT * FROM {self.fq(ident)} VERSION AS OF {snapshot_id}")
        arrow = spark_df_to_arrow(df)
        field_ids: dict[int, str] = {}
        fields = []
        by_name = {f.name: f for f in schema.fields}
        for arrow_field in arrow.schema:
            ice = by_name.get(arrow_field.name)
            if ice is None:
                raise AssertionError(f"column {arrow_field.name!r} of the Java read not in schema {snap.schema_id}")
            field_ids[ice.field_id] = ice.name
            fields.append(arrow_field.with_metadata({b"PARQUET:field_id": str(ice.field_id).encode()}))
        arrow = arrow.cast(pa.schema(fields))
        result = SnapshotRows(snapshot_id, snap.schema_id, arrow, field_ids, schema)
        self._rows_cache[key] = result
        return result

    # -- Java-side inspection ---------------------------------------------------------------

    def java_planned_files(self, ident: str, snapshot_id: int | None = None) -> set[tuple[str, frozenset[str]]]:
        """{(data file location, frozenset(delete file locations))} of the Java scan planning."""
        scan = self.java_table(ident).newScan()
        if snapshot_id is not None:
            scan = scan.useSnapshot(snapshot_id)
        out = set()
        for task in _java_list(self.spark, scan.planFiles()):
            out.add((str(task.file().location()), frozenset(str(d.location()) for d in task.deletes())))
        return out

    def java_changelog(
        self,
        ident: str,
        start_snapshot_id_exclusive: int | None = None,
        end_snapshot_id_inclusive: int | None = None,
        identifier_columns: Sequence[str] | None = None,
        compute_updates: bool = True,
        net_changes: bool = False,
    ) -> pa.Table:
        """Java's `create_changelog_view` (copy-on-write tables only: no delete files).

        `net_changes` needs `compute_updates=False` and no identifier columns (Java refuses both together).
        """
        options = []
        if start_snapshot_id_exclusive is not None:
            options.append(f"'start-snapshot-id', '{start_snapshot_id_exclusive}'")
        if end_snapshot_id_inclusive is not None:
            options.append(f"'end-snapshot-id', '{end_snapshot_id_inclusive}'")
        view = f"icetail_changes_{self.name}_{next(_catalog_counter)}"
        args = [f"table => '{self.ident(ident)}'", f"changelog_view => '{view}'"]
        if options:
            args.append(f"options => map({', '.join(options)})")
        if compute_updates:
            args.append("compute_updates => true")
        if identifier_columns:
            cols = ", ".join(f"'{c}'" for c in identifier_columns)
            args.append(f"identifier_columns => array({cols})")
        if net_changes:
            args.append("net_changes => true")
        self.spark.sql(f"CALL {self.name}.system.create_changelog_view({', '.join(args)})")
        try:
            return spark_df_to_arrow(self.spark.sql(f"SELECT * FROM {view}"))
        finally:
            self.spark.catalog.dropTempView(view)

    # -- Java API writes --------------------------------------------------------------------

    def write_equality_deletes(
        self,
        ident: str,
        key_rows_sql: str,
        columns: Sequence[str] = ("id",),
        partitions: str | Callable[[str], bool] = "live",
        commit: bool = True,
    ) -> list[Any]:
        """Commit equality-delete files through the Java API (one RowDelta, one snapshot).

        `key_rows_sql` is a Spark query returning the equality columns (by name, any order; it
        is cast to the table's types). `partitions="live"` writes one delete file per
        (spec, partition) of the current live data files (an equality delete only applies to data
        files of its own partition, unless its spec is unpartitioned); `"unpartitioned"` writes a
        single global delete file with the unpartitioned spec (id 0 must be unpartitioned); a
        callable keeps the live partitions whose path (`spec.partitionToPath`, e.g. "p=1") it accepts.
        Returns the Java DeleteFile objects; with commit=False nothing is committed.
        """
        jvm = self.spark._jvm
        table = self.java_table(ident)
        schema = table.schema()
        delete_schema = schema.select(_jlist(self.spark, columns))
        key_rows = self._java_rows(delete_schema, key_rows_sql)
        if not key_rows:
            return []
        field_ids = self.spark.sparkContext._gateway.new_array(jvm.int, len(columns))
        for i, name in enumerate(columns):
            field_ids[i] = schema.findField(name).fieldId()
        if partitions == "unpartitioned":
            targets = [(table.specs().get(0), None)]
        elif partitions == "live":
            targets = self._live_partitions(table)
        elif callable(partitions):
            targets = [
                (spec, part)
                for spec, part in self._live_partitions(table)
                if partitions(spec.partitionToPath(part) if part is not None else "")
            ]
        else:
            raise ValueError(f"partitions={partitions!r}")
        delete_files = []
        for spec, partition in targets:
            factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(schema, spec, field_ids, delete_schema, None)
            out = self._output_file(table, spec, partition)
            writer = factory.newEqDeleteWriter(out, jvm.org.apache.iceberg.FileFormat.PARQUET, partition)
            for rec in key_rows:
                writer.write(rec)
            writer.close()
            delete_files.append(writer.toDeleteFile())
        if commit:
            delta = table.newRowDelta()
            for f in delete_files:
                delta = delta.addDeletes(f)
            delta.commit()
        return delete_files

    def write_data_file(self, ident: str, rows_sql: str, partition_from_first_row: bool = True) -> Any:
        """Write (not commit) one Parquet data file with the rows of `rows_sql` (table column order)."""
        jvm = self.spark._jvm
        table = self.java_table(ident)
        schema = table.schema()
        records = self._java_rows(schema, rows_sql)
        spec = table.spec()
        partition = None
        if not spec.isUnpartitioned() and records:
            key = jvm.org.apache.iceberg.PartitionKey(spec, schema)
            key.partition(records[0])
            partition = key.copy()
        factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(schema, spec)
        out = self._output_file(table, spec, partition)
        writer = factory.newDataWriter(out, jvm.org.apache.iceberg.FileFormat.PARQUET, partition)
        for rec in records:
            writer.write(rec)
        writer.close()
        return writer.toDataFile()

    def _java_rows(self, schema: Any, rows_sql: str) -> list[Any]:
        """Iceberg `Record`s for a Spark query, converted JVM-side (Long stays Long)."""
        jvm = self.spark._jvm
        names = [f.name() for f in schema.columns()]
        df = self.sql(rows_sql)
        types = {f.name(): f.type() for f in schema.columns()}
        spark_types = jvm.org.apache.iceberg.spark.SparkSchemaUtil
        casts = []
        for n in names:
            sql_type = spark_types.convert(types[n]).sql()
            casts.append(f"CAST(`{n}` AS {sql_type}) AS `{n}`")
        df = df.selectExpr(*casts)
        converter = jvm.org.apache.iceberg.spark.SparkValueConverter
        return [converter.convert(schema, row) for row in df._jdf.collectAsList()]

    def _live_partitions(self, table: Any) -> list[tuple[Any, Any]]:
        seen: dict[tuple[int, str], tuple[Any, Any]] = {}
        for task in _java_list(self.spark, table.newScan().planFiles()):
            data = task.file()
            spec = table.specs().get(data.specId())
            partition = None if spec.isUnpartitioned() else data.partition()
            key = (data.specId(), spec.partitionToPath(partition) if partition is not None else "")
            seen.setdefault(key, (spec, partition))
        return [seen[k] for k in sorted(seen)]

    def _output_file(self, table: Any, spec: Any, partition: Any) -> Any:
        jvm = self.spark._jvm
        factory = (
            jvm.org.apache.iceberg.io.OutputFileFactory.builderFor(table, 1, next(_catalog_counter))
            .format(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .build()
        )
        if partition is None:
            return factory.newOutputFile()
        return factory.newOutputFile(spec, partition)


def _java_list(spark: Any, iterable: Any) -> list[Any]:
    lists = spark._jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists
    try:
        return list(lists.newArrayList(iterable))
    finally:
        if hasattr(iterable, "close"):
            iterable.close()


def _jlist(spark: Any, items: Iterable[Any]) -> Any:
    jl = spark._jvm.java.util.ArrayList()
    for item in items:
        jl.add(item)
    return jl


def spark_df_to_arrow(df: Any) -> pa.Table:
    """Collect a Spark DataFrame as Arrow (no pandas), keeping Spark's column types."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).cast(schema)


def new_catalog(spark: Any, root: Path, name: str | None = None, namespace: str = DEFAULT_NAMESPACE) -> JavaCatalog:
    """Register a fresh JDBC/SQLite Iceberg catalog in Spark and open it with pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    name = name or f"ice{os.getpid() % 100000}x{next(_catalog_counter)}"
    if not name.isalnum() or name.lower() != name:
        raise ValueError("catalog names must be lowercase alphanumeric (pyiceberg env var mangling)")
    root.mkdir(parents=True, exist_ok=True)
    db_path = (root / "catalog.db").resolve()
    warehouse_path = (root / "warehouse").resolve()
    warehouse_path.mkdir(parents=True, exist_ok=True)
    prefix = f"spark.sql.catalog.{name}"
    settings = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:sqlite:{db_path}",
        f"{prefix}.warehouse": f"file://{warehouse_path}",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.cache-enabled": "false",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    # Java creates the catalog tables first (with V1's iceberg_type column); pyiceberg's
    # create_all(checkfirst) then leaves them as they are.
    if namespace:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.{namespace}")
    else:
        spark.sql(f"SHOW NAMESPACES IN {name}").collect()
    py = SqlCatalog(name, uri=f"sqlite:///{db_path}", warehouse=f"file://{warehouse_path}")
    return JavaCatalog(
        name=name, spark=spark, pyiceberg=py, db_path=db_path, warehouse_path=warehouse_path, namespace=namespace
    )
