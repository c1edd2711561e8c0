"""The Iceberg mirror: `iceberg://CATALOG/NS.TABLE?mode=mirror` keeps an Iceberg table equal to the
followed table by key, exactly once.

The change rows come to the driver, as for the PostgreSQL mirror: the pipeline hands over a group of
chunks (`GroupWriteSink`, bounded by --sink-commit-rows/--sink-commit-interval), the group is
folded to one net change per key (`keyed.merge.local_merge`: commit order, key changes as a
delete of the old key) and applied as ONE overwrite snapshot (`iceberg/mirror/apply`) whose
summary names the group's chunks, as the changelog sink's appends do (`iceberg_ledger`). The
commit is made on the metadata the sink holds and lands only if the table has not moved
(`iceberg_commit`). The target's files that hold an affected key are read and rewritten in Spark
tasks when they hold enough bytes and the pipeline gave the sink its session (`use_spark`,
`iceberg/mirror/tasks`), else in the driver. A replayed group (applied, offsets not committed) is
found in the ledger and left out, whole or in part, however the replay is grouped
(`IcebergTarget._append_once`). Another
writer's commit makes ours fail as a whole: reloaded, looked up again and redone (SinkError when
the retries run out, so the pipeline retries).

The target is created by the first group when missing (`iceberg/mirror/schema`: the group's data
columns, the key as identifier fields); an existing one not followed into before is adopted at
`bind` when it matches by name, else refused in one line. The target follows the source's schema by field id, as the
changelog sink's table does (`iceberg_evolution`): before the commit of the first group of a new
schema, in its own commit on the same held metadata, columns are added, renamed, widened and
(unlike the changelog sink) dropped. A replay finds the schema changed already: nothing to do.
The key is followed by field id too: a renamed key column is still the key.

`iceberg_history.IcebergHistorySink` (`?mode=history`) is this sink with other hooks: its
`_plan` (versions, not net rows), its target shape and checks, and an evolution that keeps
dropped columns.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction

from icetail.kernel.errors import ConfigError, SinkRejectedError
from icetail.sinks.base import ChunkKey
from icetail.sinks.iceberg.changelog import IcebergTarget
from icetail.sinks.iceberg.evolution import SOURCE_FIELD_IDS, evolve_by_field_id, source_field_id
from icetail.sinks.iceberg.ledger import chunk_summary
from icetail.sinks.iceberg.mirror.apply import GroupRewrite, plan_rewrite
from icetail.sinks.iceberg.mirror.schema import check_target, source_columns, target_schema
from icetail.sinks.iceberg.mirror.tasks import SessionProvider, choose_rewrite
from icetail.sinks.keyed.merge import local_merge

log = logging.getLogger("icetail.sinks.iceberg.mirror.sink")


class IcebergMirrorSink(IcebergTarget):
    """Keeps NS.TABLE of catalog `catalog_name` equal to the followed table by key; see docs/sinks.md."""

    exactly_once: bool = True

    def __init__(self, catalog_name: str, identifier: str, *, consumer: str) -> None:
        super().__init__(catalog_name, identifier, consumer=consumer)
        self._key: tuple[str, ...] = ()
        self._key_ids: tuple[int | None, ...] = ()  # the key's source field ids: names change, ids do not
        self.replayed = 0  # chunks found in the ledger (applied before a crash) and skipped, since open
        self.duplicates = 0  # inserts of a key the target already held, since open (last writer wins)
        self.last: GroupRewrite | None = None  # the last group's commit: files read, replaced, rows
        self.files_replaced = 0  # files of the target rewritten (or dropped) by the commits since open
        self.spark_tasks = 0  # Spark tasks those rewrites ran in, since open (0: all in the driver)
        self._spark: SessionProvider | None = None  # set by the pipeline: big rewrites run in Spark tasks

    def use_spark(self, session: SessionProvider) -> None:
        """Rewrite the files of a group that reads enough bytes in Spark tasks on `session()` (asked
        for when a group needs it); without it every group is rewritten in the driver."""
        self._spark = session

    def bind(self, key: tuple[str, ...], schema: pa.Schema) -> None:
        """Create the target for change rows of `schema` keyed by `key`, or check the existing one."""
        if not key:
            raise ConfigError(f"iceberg mirror {self._where()} needs a key: give --identifier-columns")
        self._key = tuple(key)
        fields = {f.name: f for f in schema}
        self._key_ids = tuple(source_field_id(fields[k]) if k in fields else None for k in key)
        self._guarded(
            "the target cannot be prepared", "the target does not fit the source", lambda: self._checked(schema)
        )

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        """One chunk in one commit (a reconciled snapshot, a --net batch, or no grouping)."""
        return self.write_group([(key, rows)])[0]

    def write_group(self, chunks: Sequence[tuple[ChunkKey, pa.Table]]) -> list[str | None]:
        """Chunks of one batch, in delivery order, applied as one snapshot (chunks applied before left
        out); returns after the commit, so the pipeline may commit their offsets. A token each: the
        id of the snapshot that holds the chunk."""
        if not self._key:
            raise ConfigError(f"iceberg mirror {self._where()} was not bound to a key (Pipeline binds it at open)")
        for key, _ in chunks:
            self._check_consumer(key)
        names = chunks[0][0].name if len(chunks) == 1 else f"chunks {chunks[0][0].name} to {chunks[-1][0].name}"
        tokens: list[str | None] = list(
            self._guarded(f"{names} not applied", f"{names} do not fit the target", lambda: self._apply(chunks))
        )
        return tokens

    def _checked(self, schema: pa.Schema) -> Table | None:
        """The target as committed now; one not followed into before is adopted when it matches `schema`
        by name (its field-id map recorded), else refused. A missing one is left to the first group,
        created from its rows' schema: a consumer that starts before a source schema change then
        sees the target go through the source's schemas in order, not back from the current one."""
        table = self._reloaded() if self._table is not None else self._load()
        if table is None:
            return None
        self._table = table
        if SOURCE_FIELD_IDS not in table.properties:
            self._check_adopted(table, schema)
            return self._evolve(table, schema)
        identifiers = sorted(table.schema().identifier_field_ids)
        wanted = self._wanted_identifiers(table)
        if sorted(w if w is not None else -1 for w in wanted) != identifiers:
            shown = ", ".join(str(table.schema().find_column_name(i)) for i in identifiers) or "none"
            raise SinkRejectedError(
                f"iceberg mirror target {self._where()} is keyed by {shown}, not by the {self._kind} key "
                f"{', '.join(self._target_key())}; give the key with --identifier-columns, or mirror into another "
                "table"
            )
        return table

    _kind = "mirror's"  # whose key the messages name (the history's: iceberg_history)

    def _wanted_identifiers(self, table: Table) -> list[int | None]:
        """The target field ids the identifier fields must be: the key's, found by source field id."""
        known = json.loads(table.properties[SOURCE_FIELD_IDS])
        by_name = {f.name: f.field_id for f in table.schema().fields}
        return [
            known.get(str(i)) if i is not None else by_name.get(k)
            for i, k in zip(self._key_ids, self._key, strict=True)
        ]

    def _target_key(self) -> tuple[str, ...]:
        return self._key

    def _check_adopted(self, table: Table, schema: pa.Schema) -> None:
        """Refuse a target not followed into before unless it matches `schema` by name."""
        check_target(table.schema(), schema, self._key, self._where())

    def _plan(self, table: Table, rows: pa.Table, key: tuple[str, ...]) -> GroupRewrite:
        """The group's commit: the rewrites of the files its keys are in, and the rows it adds."""
        return plan_rewrite(table, local_merge(rows, key), key, choose_rewrite(self._spark))

    def _evolve(self, table: Table, schema: pa.Schema) -> Table:
        """Follow the source's schema by field id, dropped columns dropped; commits nothing when equal."""
        key = self._key_names(schema)
        table = evolve_by_field_id(table, source_columns(schema, key), self._where(), drop_missing=True)
        self._table = table
        check_target(table.schema(), schema, key, self._where())
        return table

    def _key_names(self, schema: pa.Schema) -> tuple[str, ...]:
        """The key's columns in `schema`, found by source field id (a renamed key column is still the key)."""
        by_id = {source_field_id(f): f.name for f in schema}
        return tuple(
            by_id.get(i, name) if i is not None else name for i, name in zip(self._key_ids, self._key, strict=True)
        )

    def _apply(self, chunks: Sequence[tuple[ChunkKey, pa.Table]]) -> list[str]:
        schema = chunks[0][1].schema
        key = self._key_names(schema)
        table = self._held(schema)
        counts = [(key.name, rows.num_rows) for key, rows in chunks]
        applied: list[int] = []

        def appended(table: Table, pending: list[int]) -> tuple[Table, Callable[[Transaction], None]]:
            # applied chunks form whole earlier groups: what is left is a suffix, still in commit order
            table = self._evolve(table, schema)  # a source schema change, before the group's commit
            rows = pa.concat_tables([chunks[i][1].cast(schema) for i in pending])
            rewrite = self._plan(table, rows, key)
            self.last = rewrite
            applied[:] = pending
            return table, rewrite.stage(chunk_summary(self.consumer, [counts[i] for i in pending]))

        tokens = self._append_once(counts, table, appended, replayed=lambda i: None)
        if applied and self.last is not None:
            last = self.last
            self.files_replaced += len(last.replaced)
            self.spark_tasks += last.spark_tasks
            log.debug(
                "%s: %d chunk(s) applied in snapshot %s: %d file(s) read (%s), %d replaced, %d row(s) deleted, "
                "%d upserted",
                self._where(),
                len(applied),
                tokens[applied[0]],
                last.files_read,
                f"{last.spark_tasks} Spark task(s)" if last.spark_tasks else "in the driver",
                len(last.replaced),
                last.rows_deleted,
                last.rows_upserted,
            )
        self._report(chunks, len(chunks) - len(applied))
        return tokens

    def _report(self, chunks: Sequence[tuple[ChunkKey, pa.Table]], skipped: int) -> None:
        first = chunks[0][0].name if len(chunks) == 1 else f"{chunks[0][0].name}..{chunks[-1][0].name}"
        if skipped:
            self.replayed += skipped
            log.info("%d chunk(s) of %s already applied to %s: skipped (a replay)", skipped, first, self._where())
        if skipped < len(chunks) and self.last is not None and self.last.duplicates:
            self.duplicates += self.last.duplicates
            log.warning(
                "chunk(s) %s: %d insert(s) of a key the target already held (the source holds a key twice, or the "
                "target held rows before): last writer wins; %d since start",
                first,
                self.last.duplicates,
                self.duplicates,
            )

    def _table_schema(self, schema: pa.Schema) -> pa.Schema | Schema:
        return target_schema(schema, self._key_names(schema))

    def _table_properties(self) -> dict[str, str]:
        """A target the mirror creates merges its manifests (iceberg/mirror/manifests: else one more a group)."""
        return {TableProperties.MANIFEST_MERGE_ENABLED: "true"}
