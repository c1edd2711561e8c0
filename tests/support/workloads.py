"""Seeded random workloads written by the Java reference (Spark SQL + Iceberg Java API).

`run_workload(catalog, ident, seed, steps, format_version, partitioned, mode)` creates the table
and mixes every snapshot kind Java produces:

* appends (with duplicate rows inside a batch, and copies of live rows via INSERT ... SELECT),
* DELETE / UPDATE / MERGE INTO in merge-on-read (v2 position deletes, v3 deletion vectors) and
  copy-on-write (overwrite snapshots rewriting whole files; carry-over rows),
* metadata-only deletes of whole partitions, INSERT OVERWRITE (static: replaces everything),
* equality deletes committed through the Java API (`JavaCatalog.write_equality_deletes`),
* compaction: `rewrite_data_files` and `rewrite_position_delete_files` (replace snapshots),
* schema evolution (add column, rename, drop, int->bigint and float->double promotion) and
  partition evolution, which create no snapshot but change what later snapshots look like.

Values are chosen so that comparisons are exact: floats are multiples of 1/4, doubles are
two-decimal literals, with NULLs and the occasional NaN. Workloads are small (tens of rows,
<= `steps` snapshots) so that a test stays within seconds.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

MOR = "merge-on-read"
COW = "copy-on-write"
MIXED = "mixed"
MODES = (MOR, COW, MIXED)


@dataclass
class Column:
    name: str
    type: str  # Spark SQL type name


@dataclass
class LogEntry:
    snapshot_id: int | None  # None: the statement created no snapshot
    operation: str
    statement: str
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.snapshot_id}: [{self.operation}] ({self.seconds:.1f}s) {self.statement}"


def table_properties(format_version: int, mode: str) -> dict[str, str]:
    props = {"format-version": str(format_version)}
    row_mode = COW if mode == COW else MOR
    for op in ("delete", "update", "merge"):
        props[f"write.{op}.mode"] = row_mode
    return props


def _props_sql(props: dict[str, str]) -> str:
    return ", ".join(f"'{k}'='{v}'" for k, v in props.items())


@dataclass
class Workload:
    catalog: Any  # tests.support.javaref.JavaCatalog
    ident: str
    seed: int
    steps: int = 10
    format_version: int = 2
    partitioned: bool = False
    mode: str = MOR
    equality_deletes: bool = True
    schema_evolution: bool = True
    partition_evolution: bool = True
    max_id: int = 30
    log: list[LogEntry] = field(default_factory=list)
    snapshot_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.rng = random.Random(self.seed)
        self.ident = self.catalog.ident(self.ident)
        self.fq = self.catalog.fq(self.ident)
        self.columns = [
            Column("id", "bigint"),
            Column("p", "int"),
            Column("n", "int"),
            Column("f", "float"),
            Column("v", "string"),
            Column("d", "double"),
            Column("x", "string"),
        ]
        self.evolved: set[str] = set()
        self.current_mode = COW if self.mode == COW else MOR

    # -- public -----------------------------------------------------------------------------

    def create(self) -> None:
        cols = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        part = " PARTITIONED BY (p)" if self.partitioned else ""
        props = table_properties(self.format_version, self.mode)
        self._exec(f"CREATE TABLE {self.fq} ({cols}) USING iceberg{part} TBLPROPERTIES ({_props_sql(props)})", "create")

    def run(self) -> list[int]:
        self.create()
        self.insert(rows=self.rng.randrange(15, 25))
        attempts = 0
        while len(self.snapshot_ids) < self.steps and attempts < self.steps * 4:
            attempts += 1
            self.maybe_evolve()
            if self.mode == MIXED and self.rng.random() < 0.5:
                self.set_mode(self.rng.choice((MOR, COW)))
            op = self.choose()
            getattr(self, op)()
        return list(self.snapshot_ids)

    def describe(self) -> str:
        head = (
            f"workload seed={self.seed} v{self.format_version} "
            f"{'partitioned' if self.partitioned else 'unpartitioned'} mode={self.mode}"
        )
        return "\n".join([head, *(f"  {e}" for e in self.log)])

    # -- choosing ---------------------------------------------------------------------------

    def choose(self) -> str:
        weights = {
            "insert": 3,
            "insert_copies": 1,
            "delete": 3,
            "update": 3,
            "merge": 2,
            "overwrite": 1,
            "compact": 1,
        }
        if self.equality_deletes:
            weights["eq_delete"] = 2
        if self.partitioned:
            weights["delete_partition"] = 1
        if self.format_version == 2 and self._summary_int("total-position-deletes") > 0:
            weights["compact_deletes"] = 1
        ops = sorted(weights)
        return self.rng.choices(ops, weights=[weights[o] for o in ops])[0]

    def maybe_evolve(self) -> None:
        options = []
        if self.schema_evolution:
            options += [o for o in ("add_column", "rename_column", "drop_column", "promote_int", "promote_float")
                        if o not in self.evolved]
        if self.partition_evolution and "partition" not in self.evolved:
            options.append("partition")
        if options and self.rng.random() < 0.3:
            op = self.rng.choice(options)
            self.evolved.add(op)
            getattr(self, "evolve_" + op)()

    # -- values -----------------------------------------------------------------------------

    def col(self, logical: str) -> Column | None:
        """Current column for the original name (after renames); None once dropped."""
        for c in self.columns:
            if c.name == logical or (logical == "v" and c.name == "w"):
                return c
        return None

    def literal(self, column: Column, row_id: int) -> str:
        r = self.rng
        t = column.type
        if column.name == "id":
            return f"{row_id}L"
        if column.name == "p":
            return str(r.randrange(3))
        if r.random() < 0.12:
            return f"CAST(NULL AS {t})"
        if t == "bigint":
            return f"{r.randrange(-50, 1000)}L"
        if t == "int":
            return str(r.randrange(-50, 1000))
        if t == "float":
            return f"CAST({r.randrange(-40, 40) / 4} AS FLOAT)"
        if t == "double":
            if column.name == "d" and r.random() < 0.05:
                return "CAST('NaN' AS DOUBLE)"
            return f"{r.randrange(-10000, 10000) / 100}D" if column.name == "d" else f"{r.randrange(-40, 40) / 4}D"
        if t == "string":
            return f"'{column.name}{r.randrange(12)}'"
        raise AssertionError(t)

    def row(self, row_id: int) -> list[str]:
        return [self.literal(c, row_id) for c in self.columns]

    def predicate(self) -> str:
        m = self.rng.choice((3, 4, 5, 7))
        return f"id % {m} = {self.rng.randrange(m)}"

    # -- snapshot-producing operations ------------------------------------------------------

    def insert(self, rows: int | None = None) -> None:
        rows = rows or self.rng.randrange(3, 12)
        batch = [self.row(self.rng.randrange(self.max_id)) for _ in range(rows)]
        for _ in range(self.rng.randrange(0, 3)):  # exact duplicates inside the batch
            batch.append(list(self.rng.choice(batch)))
        values = ", ".join("(" + ", ".join(r) + ")" for r in batch)
        self._exec(f"INSERT INTO {self.fq} VALUES {values}", "insert")

    def insert_copies(self) -> None:
        self._exec(f"INSERT INTO {self.fq} SELECT * FROM {self.fq} WHERE {self.predicate()}", "insert-copies")

    def delete(self) -> None:
        pred = self.predicate()
        v = self.col("v")
        if v is not None and self.rng.random() < 0.2:
            pred = f"{v.name} IS NULL OR {pred}"
        self._exec(f"DELETE FROM {self.fq} WHERE {pred}", f"delete/{self.current_mode}")

    def delete_partition(self) -> None:
        self._exec(f"DELETE FROM {self.fq} WHERE p = {self.rng.randrange(3)}", "delete-partition")

    def update(self) -> None:
        sets = []
        v = self.col("v")
        d = self.col("d")
        n = self.col("n")
        roll = self.rng.random()
        if roll < 0.15 and n is not None:
            sets.append(f"{n.name} = {n.name}")  # no-op update: every touched row is a carry-over
        else:
            if v is not None:
                sets.append(f"{v.name} = concat(coalesce({v.name}, ''), 'u')")
            if d is not None and self.rng.random() < 0.6:
                sets.append(f"{d.name} = {d.name} + 1D")
            if not sets:
                sets.append("p = p")
        self._exec(f"UPDATE {self.fq} SET {', '.join(sets)} WHERE {self.predicate()}", f"update/{self.current_mode}")

    def merge(self) -> None:
        ids = self.rng.sample(range(self.max_id + 5), self.rng.randrange(3, 9))
        src_rows = [[*self.row(i), str(self.rng.randrange(3))] for i in ids]
        names = [c.name for c in self.columns]
        values = ", ".join("(" + ", ".join(r) + ")" for r in src_rows)
        sets = [f"t.{c.name} = s.{c.name}" for c in self.columns if c.name not in ("id", "p")][:2] or ["t.p = s.p"]
        stmt = (
            f"MERGE INTO {self.fq} t USING (SELECT * FROM VALUES {values} AS s({', '.join(names)}, op)) s "
            f"ON t.id = s.id "
            f"WHEN MATCHED AND s.op = 0 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) VALUES ({', '.join('s.' + n for n in names)})"
        )
        self._exec(stmt, f"merge/{self.current_mode}")

    def overwrite(self) -> None:
        self._exec(
            f"INSERT OVERWRITE {self.fq} SELECT * FROM {self.fq} WHERE NOT ({self.predicate()})", "insert-overwrite"
        )

    def eq_delete(self) -> None:
        cols = ["id"]
        v = self.col("v")
        if v is not None and self.rng.random() < 0.3:
            cols.append(v.name)
        key_sql = f"SELECT DISTINCT {', '.join(cols)} FROM {self.fq} WHERE {self.predicate()}"
        if self.rng.random() < 0.2:  # keys that match nothing are legal too
            key_sql = f"SELECT {self.max_id + 100}L AS id" + (f", 'nothing' AS {cols[1]}" if len(cols) > 1 else "")
        before = self.catalog.current_snapshot_id(self.ident)
        start = time.perf_counter()
        files = self.catalog.write_equality_deletes(self.ident, key_sql, columns=cols)
        after = self.catalog.current_snapshot_id(self.ident)
        stmt = f"java RowDelta eq-delete on {cols} ({len(files)} files): {key_sql}"
        self._record(before, after, "eq-delete", stmt, time.perf_counter() - start)

    def compact(self) -> None:
        self._exec(
            f"CALL {self.catalog.name}.system.rewrite_data_files(table => '{self.ident}', "
            f"options => map('rewrite-all', 'true'))",
            "rewrite_data_files",
        )

    def compact_deletes(self) -> None:
        self._exec(
            f"CALL {self.catalog.name}.system.rewrite_position_delete_files(table => '{self.ident}', "
            f"options => map('rewrite-all', 'true'))",
            "rewrite_position_delete_files",
        )

    # -- evolution (no snapshot) ------------------------------------------------------------

    def set_mode(self, mode: str) -> None:
        if mode == self.current_mode:
            return
        self.current_mode = mode
        props = {f"write.{op}.mode": mode for op in ("delete", "update", "merge")}
        self._exec(f"ALTER TABLE {self.fq} SET TBLPROPERTIES ({_props_sql(props)})", "set-mode")

    def evolve_add_column(self) -> None:
        self.columns.append(Column("e", "bigint"))
        self._exec(f"ALTER TABLE {self.fq} ADD COLUMN e bigint", "add-column")

    def evolve_rename_column(self) -> None:
        c = self.col("v")
        if c is None:
            return
        c.name = "w"
        self._exec(f"ALTER TABLE {self.fq} RENAME COLUMN v TO w", "rename-column")

    def evolve_drop_column(self) -> None:
        self.columns = [c for c in self.columns if c.name != "x"]
        self._exec(f"ALTER TABLE {self.fq} DROP COLUMN x", "drop-column")

    def evolve_promote_int(self) -> None:
        c = self.col("n")
        assert c is not None
        c.type = "bigint"
        self._exec(f"ALTER TABLE {self.fq} ALTER COLUMN n TYPE bigint", "promote-int")

    def evolve_promote_float(self) -> None:
        c = self.col("f")
        assert c is not None
        c.type = "double"
        self._exec(f"ALTER TABLE {self.fq} ALTER COLUMN f TYPE double", "promote-float")

    def evolve_partition(self) -> None:
        if self.partitioned:
            self._exec(f"ALTER TABLE {self.fq} ADD PARTITION FIELD bucket(2, id)", "partition-evolution")
        else:
            self._exec(f"ALTER TABLE {self.fq} ADD PARTITION FIELD p", "partition-evolution")

    # -- plumbing ---------------------------------------------------------------------------

    def _summary_int(self, key: str) -> int:
        snap = self.catalog.load_table(self.ident).current_snapshot()
        if snap is None:
            return 0
        return int(snap.summary.get(key) or 0)

    def _exec(self, stmt: str, operation: str) -> None:
        before = self.catalog.current_snapshot_id(self.ident) if operation != "create" else None
        start = time.perf_counter()
        self.catalog.spark.sql(stmt).collect()
        seconds = time.perf_counter() - start
        after = self.catalog.current_snapshot_id(self.ident)
        self._record(before, after, operation, stmt, seconds)

    def _record(self, before: int | None, after: int | None, operation: str, stmt: str, seconds: float) -> None:
        created = after if after is not None and after != before else None
        if created is not None:
            self.snapshot_ids.append(created)
        self.log.append(LogEntry(created, operation, stmt if len(stmt) < 400 else stmt[:400] + " ...", seconds))


def run_workload(
    catalog: Any,
    ident: str,
    seed: int,
    steps: int = 10,
    format_version: int = 2,
    partitioned: bool = False,
    mode: str = MOR,
    **options: Any,
) -> list[int]:
    """Create `ident` and run a seeded workload; returns the snapshot ids created, in order."""
    return Workload(catalog, ident, seed, steps, format_version, partitioned, mode, **options).run()
