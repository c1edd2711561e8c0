"""A seeded Java workload over every type Spark 3.5 can write to Iceberg, nested at several levels.

`NestedWorkload` runs the snapshot kinds of `Workload` (appends, merge-on-read and copy-on-write
DELETE/UPDATE/MERGE, INSERT OVERWRITE, equality deletes, compaction) on a table with

* a struct holding a map of string to list (`s`), a list (`arr`), a list of structs (`ls`), a map
  of string to struct holding a list (`mp`), with NULLs and empty collections at every level,
* every primitive Spark can write to Iceberg: boolean, int, bigint, float, double, decimal(9,2),
  decimal(38,10), date, timestamp (timestamptz), timestamp_ntz (timestamp), string, binary,

and evolves inside the nested types (a field added to a struct, to a list's struct element and
to a map's struct value; a renamed nested field; a list element widened from int to bigint).
Equality deletes key on a primitive nested in a struct (`s.a`) as the spec allows.

Types are small trees: a Spark type name, `("struct", [(name, type), ...])`, `("array", element)`
or `("map", key, value)`; literals are generated from the tree, so a statement always matches
the table's current shape.
"""

from __future__ import annotations

from typing import Any

from tests.support.workloads import Column, Workload

Type = Any  # str | tuple


def sql_type(t: Type) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "struct":
        return "struct<" + ",".join(f"{name}:{sql_type(inner)}" for name, inner in t[1]) + ">"
    if t[0] == "array":
        return f"array<{sql_type(t[1])}>"
    return f"map<{sql_type(t[1])},{sql_type(t[2])}>"


class NestedWorkload(Workload):
    """`Workload` with nested and less common column types; see the module docstring."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.types: dict[str, Type] = {
            "id": "bigint",
            "p": "int",
            "s": ("struct", [("a", "int"), ("b", "string"), ("m", ("map", "string", ("array", "int")))]),
            "arr": ("array", "int"),
            "ls": ("array", ("struct", [("x", "int"), ("y", "string")])),
            "mp": ("map", "string", ("struct", [("q", "double"), ("r", ("array", "string"))])),
            "flag": "boolean",
            "f": "float",
            "d": "double",
            "small": "decimal(9,2)",
            "dec": "decimal(38,10)",
            "dt": "date",
            "ts": "timestamp",
            "tsn": "timestamp_ntz",
            "bin": "binary",
            "v": "string",
        }
        self._sync_columns()

    def _sync_columns(self) -> None:
        self.columns = [Column(name, sql_type(t)) for name, t in self.types.items()]

    # -- values -----------------------------------------------------------------------------

    def literal(self, column: Column, row_id: int) -> str:
        if column.name == "id":
            return f"{row_id}L"
        if column.name == "p":
            return str(self.rng.randrange(3))
        return self.value(self.types[column.name])

    def value(self, t: Type, depth: int = 0) -> str:
        r = self.rng
        if r.random() < 0.12:
            return f"CAST(NULL AS {sql_type(t)})"
        if isinstance(t, tuple):
            if t[0] == "struct":
                parts = ", ".join(f"'{name}', {self.value(inner, depth + 1)}" for name, inner in t[1])
                return f"named_struct({parts})"
            size = r.choice((0, 1, 2, 3))
            if size == 0:
                return f"CAST({'array()' if t[0] == 'array' else 'map()'} AS {sql_type(t)})"
            if t[0] == "array":
                return f"CAST(array({', '.join(self.value(t[1], depth + 1) for _ in range(size))}) AS {sql_type(t)})"
            keys = r.sample(["k0", "k1", "k2", "k3"], size)
            entries = ", ".join(f"'{k}', {self.value(t[2], depth + 1)}" for k in keys)
            return f"CAST(map({entries}) AS {sql_type(t)})"
        if t in ("int", "bigint"):
            return f"CAST({r.randrange(-50, 1000)} AS {t})"
        if t == "boolean":
            return r.choice(("true", "false"))
        if t == "float":
            return f"CAST({r.randrange(-40, 40) / 4} AS FLOAT)"
        if t == "double":
            if r.random() < 0.05:
                return "CAST('NaN' AS DOUBLE)"
            return f"{r.randrange(-10000, 10000) / 100}D"
        if t == "decimal(9,2)":
            return f"CAST('{r.randrange(-10**8, 10**8) / 100:.2f}' AS decimal(9,2))"
        if t == "decimal(38,10)":
            whole = r.randrange(-(10**27), 10**27)
            return f"CAST('{whole}.{r.randrange(10**10):010d}' AS decimal(38,10))"
        if t == "date":
            return f"DATE'20{r.randrange(10, 40)}-0{r.randrange(1, 10)}-1{r.randrange(10)}'"
        if t in ("timestamp", "timestamp_ntz"):
            day = f"20{r.randrange(10, 40)}-0{r.randrange(1, 10)}-1{r.randrange(10)}"
            literal = f"{day} 1{r.randrange(10)}:3{r.randrange(10)}:00.{r.randrange(10**6):06d}"
            return f"{'TIMESTAMP' if t == 'timestamp' else 'TIMESTAMP_NTZ'}'{literal}'"
        if t == "binary":
            return "X'" + "".join(f"{r.randrange(256):02X}" for _ in range(r.randrange(0, 5))) + "'"
        if t == "string":
            return f"'s{r.randrange(12)}'"
        raise AssertionError(t)

    # -- snapshot-producing operations that touch nested values -----------------------------

    def choose(self) -> str:
        # Java 1.10's rewrite_position_delete_files fails on tables with a map column
        # ("Invalid partition field parent: map<...>" in PositionDeletesRowReader): not an operation here.
        op = super().choose()
        return "compact" if op == "compact_deletes" else op

    def update(self) -> None:
        roll = self.rng.random()
        arr_type = sql_type(self.types["arr"])
        if roll < 0.15:
            sets = ["v = v"]  # no-op update: every touched row is a carry-over
        elif roll < 0.5:
            sets = [f"arr = CASE WHEN arr IS NULL THEN CAST(array(7) AS {arr_type}) "
                    f"ELSE concat(arr, CAST(array(7) AS {arr_type})) END", "flag = NOT flag"]
        else:
            sets = [f"s = {self.value(self.types['s'])}", "v = concat(coalesce(v, ''), 'u')"]
        self._exec(f"UPDATE {self.fq} SET {', '.join(sets)} WHERE {self.predicate()}", f"update/{self.current_mode}")

    def delete(self) -> None:
        pred = self.predicate()
        if self.rng.random() < 0.3:
            pred = f"s.a IS NULL OR size(arr) > 2 OR {pred}"
        self._exec(f"DELETE FROM {self.fq} WHERE {pred}", f"delete/{self.current_mode}")

    def eq_delete(self) -> None:
        cols = self.rng.choice((["id"], ["id", "s.a"], ["s.a"]))
        exprs = ["id" if c == "id" else "named_struct('a', s.a) AS s" for c in cols]
        key_sql = f"SELECT DISTINCT {', '.join(exprs)} FROM {self.fq} WHERE {self.predicate()}"
        before = self.catalog.current_snapshot_id(self.ident)
        files = self.catalog.write_equality_deletes(self.ident, key_sql, columns=cols)
        after = self.catalog.current_snapshot_id(self.ident)
        stmt = f"java RowDelta eq-delete on {cols} ({len(files)} files): {key_sql}"
        self._record(before, after, "eq-delete", stmt, 0)
        if "s.a" in cols and after != before:
            # Java 1.10 then fails every later UPDATE/MERGE that applies this delete ("Cannot find
            # required field for ID ..." in DeleteFilter.fileProjection); a compaction right away
            # rewrites the files it applies to, so the workload can go on.
            self.compact()

    # -- evolution inside nested types (no snapshot) ----------------------------------------

    def maybe_evolve(self) -> None:
        options = [o for o in self.NESTED_EVOLUTIONS if o not in self.evolved] if self.schema_evolution else []
        if options and self.rng.random() < 0.35:
            op = self.rng.choice(options)
            self.evolved.add(op)
            getattr(self, "evolve_" + op)()
            self._sync_columns()

    NESTED_EVOLUTIONS = ("struct_add", "struct_rename", "widen_element", "list_struct_add", "map_value_add")

    def evolve_struct_add(self) -> None:
        self.types["s"][1].append(("c", "bigint"))
        self._exec(f"ALTER TABLE {self.fq} ADD COLUMN s.c bigint", "add-nested-field")

    def evolve_struct_rename(self) -> None:
        fields = self.types["s"][1]
        fields[:] = [("bb" if name == "b" else name, t) for name, t in fields]
        self._exec(f"ALTER TABLE {self.fq} RENAME COLUMN s.b TO bb", "rename-nested-field")

    def evolve_widen_element(self) -> None:
        self.types["arr"] = ("array", "bigint")
        self._exec(f"ALTER TABLE {self.fq} ALTER COLUMN arr.element TYPE bigint", "widen-list-element")

    def evolve_list_struct_add(self) -> None:
        self.types["ls"][1][1].append(("z", "string"))
        self._exec(f"ALTER TABLE {self.fq} ADD COLUMN ls.element.z string", "add-list-element-field")

    def evolve_map_value_add(self) -> None:
        self.types["mp"][2][1].append(("w", "int"))
        self._exec(f"ALTER TABLE {self.fq} ADD COLUMN mp.value.w int", "add-map-value-field")
