"""The Java-written workload the mirror differential tests run (PostgreSQL and Iceberg mirrors):
a keyed table ns.t, then batches of UPDATE, DELETE and MERGE, a key change, a key deleted and
re-inserted in one batch, a partition move, a no-op update, compaction, INSERT OVERWRITE, and
(merge-on-read) equality deletes. After each batch the test runs the mirror and checks it."""

from __future__ import annotations

from typing import Any

from tests.support.workloads import MOR, table_properties


def create_keyed_table(catalog: Any, mode: str, partitioned: bool) -> None:
    """ns.t (id bigint key, p int, v string, d double), format v2, `mode` for its row-level changes."""
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, mode).items())
    part = " PARTITIONED BY (p)" if partitioned else ""
    catalog.sql(
        f"CREATE TABLE {{cat}}.ns.t (id bigint NOT NULL, p int, v string, d double) USING iceberg{part} "
        f"TBLPROPERTIES ({props})"
    )
    catalog.sql("ALTER TABLE {cat}.ns.t SET IDENTIFIER FIELDS id")


def keyed_steps(partitioned: bool) -> list[list[str]]:
    """The batches of Spark SQL statements ({cat}: the catalog) run between two mirror runs."""
    rows = ", ".join(f"({i}L, {i % 2}, 'v{i}', {i}.5D)" for i in range(1, 21))
    return [
        [f"INSERT INTO {{cat}}.ns.t VALUES {rows}"],
        ["UPDATE {cat}.ns.t SET v = concat(v, 'u') WHERE id IN (2, 3, 8)", "DELETE FROM {cat}.ns.t WHERE id IN (4, 9)"],
        [
            "MERGE INTO {cat}.ns.t t USING (SELECT * FROM VALUES (1L, 'm', 0), (5L, 'm', 1), (30L, 'new', 1) "
            "AS s(id, v, op)) s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET t.v = s.v, t.d = t.d + 1D "
            "WHEN NOT MATCHED THEN INSERT (id, p, v, d) VALUES (s.id, 0, s.v, 0D)",
            "UPDATE {cat}.ns.t SET id = id + 100 WHERE id IN (6, 11)",  # the key changes
        ],
        [
            "DELETE FROM {cat}.ns.t WHERE id = 7",  # deleted and re-inserted in one batch
            "INSERT INTO {cat}.ns.t VALUES (7L, 1, 'seven again', 7.0D)",
            "UPDATE {cat}.ns.t SET p = 1 - p, v = 'moved' WHERE id = 10",  # another partition, same key
            "UPDATE {cat}.ns.t SET v = v WHERE id = 12",  # changes nothing: carry-overs only
        ],
        ["DELETE FROM {cat}.ns.t WHERE id > 100", "INSERT INTO {cat}.ns.t VALUES (106L, 0, 'back', NULL)"],
        ["CALL {cat}.system.rewrite_data_files(table => 'ns.t', options => map('rewrite-all', 'true'))"],
        [
            "INSERT OVERWRITE {cat}.ns.t SELECT id, p, concat(v, '-ow'), d FROM {cat}.ns.t WHERE p = 0 AND id < 15"
            if partitioned
            else "INSERT OVERWRITE {cat}.ns.t SELECT id, p, concat(v, '-ow'), d FROM {cat}.ns.t WHERE id < 15"
        ],
    ]


def equality_delete_step(catalog: Any) -> None:
    """Equality deletes (as Flink writes them), committed through the Java API, then a key back."""
    catalog.write_equality_deletes("t", "SELECT 2L AS id UNION ALL SELECT 13L AS id")
    catalog.sql("INSERT INTO {cat}.ns.t VALUES (2L, 0, 'two again', 2.0D)")


def create_keyless_v3_table(catalog: Any) -> None:
    """ns.t (id bigint, v string), format v3, merge-on-read, no identifier fields: mirrored by `_row_id`."""
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(3, MOR).items())
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")


ROW_ID_STEPS = [
    ["INSERT INTO {cat}.ns.t VALUES (1L, 'a'), (2L, 'b'), (2L, 'b'), (3L, 'c')"],  # a duplicate row: no key
    ["UPDATE {cat}.ns.t SET v = 'B' WHERE id = 2", "DELETE FROM {cat}.ns.t WHERE id = 3"],
    ["UPDATE {cat}.ns.t SET id = 10 WHERE id = 1", "INSERT INTO {cat}.ns.t VALUES (3L, 'c again')"],
]


def create_evolving_table(catalog: Any) -> None:
    """ns.t (id bigint key, n int, v string, x string), merge-on-read, evolved by Java between writes
    (EVOLUTION_STEPS): ADD, RENAME, ALTER TYPE int -> bigint, DROP; five schemas, so five batches
    (a batch never spans a schema change)."""
    props = ", ".join(f"'{k}'='{v}'" for k, v in table_properties(2, MOR).items())
    catalog.sql(f"CREATE TABLE {{cat}}.ns.t (id bigint NOT NULL, n int, v string, x string) USING iceberg "
                f"TBLPROPERTIES ({props})")  # fmt: skip
    catalog.sql("ALTER TABLE {cat}.ns.t SET IDENTIFIER FIELDS id")
    for statement in EVOLUTION_STEPS:
        catalog.sql(statement)


EVOLUTION_STEPS = (
    "INSERT INTO {cat}.ns.t VALUES (1L, 10, 'a', 'x1'), (2L, 20, 'b', 'x2')",
    "ALTER TABLE {cat}.ns.t ADD COLUMN e bigint",
    "INSERT INTO {cat}.ns.t VALUES (4L, 40, 'd', 'x4', 400L)",
    "UPDATE {cat}.ns.t SET e = 100L WHERE id = 1",
    "ALTER TABLE {cat}.ns.t RENAME COLUMN v TO w",
    "INSERT INTO {cat}.ns.t VALUES (5L, 50, 'e', 'x5', 500L)",
    "ALTER TABLE {cat}.ns.t ALTER COLUMN n TYPE bigint",
    "INSERT INTO {cat}.ns.t VALUES (6L, 6000000000L, 'f', 'x6', 600L)",
    "DELETE FROM {cat}.ns.t WHERE id = 2",
    "ALTER TABLE {cat}.ns.t DROP COLUMN x",
    "INSERT INTO {cat}.ns.t VALUES (7L, 70L, 'g', 700L)",
    "UPDATE {cat}.ns.t SET w = 'gg' WHERE id = 7",
)
