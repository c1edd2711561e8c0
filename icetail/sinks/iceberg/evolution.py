"""The Iceberg sink table follows the source table's schema changes by field id, never by name.

Change rows carry each data column's source field id (`PARQUET:field_id`, see
`reader.projection.arrow_schema_with_ids`). The sink table records, in its property
`icetail.source-field-ids`, which of its own field ids holds which source field id, and
evolves itself the way Iceberg users expect of a sink (as Flink's dynamic Iceberg sink and the
Kafka Connect Iceberg sink do):

* a source field it has never seen is added (every sink column is optional);
* a source field whose name changed is renamed in the sink (same sink field id, so its
  earlier rows keep their values under the new name);
* a widened type (int -> long, float -> double, decimal precision) is widened;
* a dropped source field stays in the sink as an optional column, null in later rows: the
  sink keeps every value it was ever given, as Iceberg keeps dropped columns in old schemas;
  a mirror (`drop_missing`), whose table must equal the source, drops it instead (a column
  added again under a dropped one's name is then a new column, not a clash).

Columns without a field id (icetail's `_change_type`, ..., `_schema_id`, or rows of a caller
that carry no ids) are matched by name. A sink table without the property (created by an
icetail before this one) is adopted once by name: its columns are those of the change rows it
was created from. The schema change and the new property commit in one transaction, before any
row of the new schema is appended, so exactly-once (the commit ledger) is untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ResolveError
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import promote
from pyiceberg.table import Table
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StructType

from icetail.kernel.errors import SinkRejectedError
from icetail.sinks.iceberg.commit import commit_retries, outraced
from icetail.sinks.iceberg.schema import sink_schema

SOURCE_FIELD_IDS = "icetail.source-field-ids"  # table property: JSON {source field id: sink field id}
FIELD_ID_KEY = b"PARQUET:field_id"


def source_field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID_KEY)
    return int(raw) if raw is not None else None


@dataclass
class _Changes:
    """What one evolution does, in paths of the sink schema as it is before the change."""

    adds: list[tuple[tuple[str, ...], IcebergType, pa.Field]] = field(default_factory=list)
    renames: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    widenings: list[tuple[tuple[str, ...], IcebergType]] = field(default_factory=list)
    mapped: dict[int, int] = field(default_factory=dict)  # source id -> sink id of fields matched
    drop: bool = False  # drop the sink fields whose source field is gone (a mirror)
    drops: list[tuple[str, ...]] = field(default_factory=list)
    gone: set[int] = field(default_factory=set)  # source ids of the dropped fields

    def __bool__(self) -> bool:
        return bool(self.adds or self.renames or self.widenings or self.drops)


def evolve_by_field_id(table: Table, rows: pa.Schema, where: str, *, drop_missing: bool = False) -> Table:
    """Evolve `table` so that it holds rows of `rows` (schema and id map in one commit); the table after.

    `drop_missing`: a sink field whose source field the rows lack is dropped (the mirror), not kept.
    The commit is made on `table` as the sink holds it; when another writer committed since (a
    conflict), the evolution is worked out again on the table as committed now and committed again,
    up to the table's `commit.retry.num-retries` (chaos harness, finding 15: it was made once).
    """
    retries = commit_retries(table)
    for attempt in range(retries + 1):
        try:
            return _evolved_once(table, rows, where, drop_missing)
        except CommitFailedException as exc:
            if attempt == retries:
                raise CommitFailedException(outraced(attempt + 1, retries)) from exc
            table = table.refresh()
    raise AssertionError("unreachable")  # pragma: no cover


def _evolved_once(table: Table, rows: pa.Schema, where: str, drop_missing: bool) -> Table:
    known = _known_ids(table)
    changes = _Changes(drop=drop_missing)
    _match(rows, table.schema().as_struct(), (), known, changes, where)
    mapping = {s: t for s, t in {**known, **changes.mapped}.items() if s not in changes.gone}
    if not changes and mapping == known and SOURCE_FIELD_IDS in table.properties:
        return table
    with table.transaction() as tx:
        if changes:
            with tx.update_schema() as update:
                for path in changes.drops:  # first: an added column may take a dropped one's name
                    update.delete_column(path)
                for path, new_name in changes.renames:
                    update.rename_column(path, new_name)
                for path, widened in changes.widenings:
                    update.update_column(path, field_type=widened)
                for path, iceberg_type, _ in changes.adds:
                    update.add_column(path, iceberg_type)
            evolved = tx.table_metadata.schema()
            for path, _, arrow_field in changes.adds:
                added = evolved.find_field(".".join(_renamed(path, changes.renames)))
                _map_added(arrow_field, added, mapping)
        tx.set_properties({SOURCE_FIELD_IDS: json.dumps({str(k): v for k, v in sorted(mapping.items())})})
    return table.refresh()


def _known_ids(table: Table) -> dict[int, int]:
    raw = table.properties.get(SOURCE_FIELD_IDS)
    if raw is None:
        return {}
    return {int(source): int(sink) for source, sink in json.loads(raw).items()}


def _match(
    incoming: pa.Schema | pa.StructType,
    sink: StructType,
    path: tuple[str, ...],
    known: dict[int, int],
    changes: _Changes,
    where: str,
) -> None:
    """Match `incoming`'s fields to the fields of the sink struct at `path`, recording what must change."""
    by_id = {f.field_id: f for f in sink.fields}
    by_name = {f.name: f for f in sink.fields}
    leaving = _leaving(incoming, sink, known) if changes.drop else {}
    for arrow_field in incoming:
        source_id = source_field_id(arrow_field)
        target: NestedField | None = None
        if source_id is not None and source_id in known:
            target = by_id.get(known[source_id])
        elif source_id is None or not known:  # icetail's own columns; or adopting a table without the map
            target = by_name.get(arrow_field.name)
        if target is None:
            clash = by_name.get(arrow_field.name)
            if clash is not None and clash.field_id not in leaving:
                raise SinkRejectedError(
                    f"iceberg sink {where}: column {'.'.join((*path, arrow_field.name))} of the sink table holds "
                    f"another source column (a column dropped and added again under its name?); rename the sink "
                    f"table's column (ALTER TABLE ... RENAME COLUMN) and run again"
                )
            changes.adds.append((path + (arrow_field.name,), _iceberg_type(arrow_field), arrow_field))
            continue
        if source_id is not None:
            changes.mapped[source_id] = target.field_id
        if target.name != arrow_field.name:
            changes.renames.append((path + (target.name,), arrow_field.name))
        _match_type(arrow_field, target, path + (target.name,), known, changes, where)
    for sink_id, source_id in leaving.items():
        changes.drops.append(path + (by_id[sink_id].name,))
        changes.gone.add(source_id)


def _leaving(incoming: pa.Schema | pa.StructType, sink: StructType, known: dict[int, int]) -> dict[int, int]:
    """The sink fields of this struct whose source field the rows lack: sink id -> source id."""
    present = {source_field_id(f) for f in incoming}
    source_of = {sink_id: source_id for source_id, sink_id in known.items()}
    return {
        f.field_id: source_of[f.field_id]
        for f in sink.fields
        if f.field_id in source_of and source_of[f.field_id] not in present
    }


def _match_type(
    arrow_field: pa.Field,
    target: NestedField,
    path: tuple[str, ...],
    known: dict[int, int],
    changes: _Changes,
    where: str,
) -> None:
    arrow_type, sink_type = arrow_field.type, target.field_type
    if pa.types.is_struct(arrow_type) and isinstance(sink_type, StructType):
        _match(arrow_type, sink_type, path, known, changes, where)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        if isinstance(sink_type, ListType):
            _match_type(arrow_type.value_field, sink_type.element_field, (*path, "element"), known, changes, where)
    elif pa.types.is_map(arrow_type):
        if isinstance(sink_type, MapType):
            _match_type(arrow_type.key_field, sink_type.key_field, (*path, "key"), known, changes, where)
            _match_type(arrow_type.item_field, sink_type.value_field, (*path, "value"), known, changes, where)
    elif sink_type.is_primitive:
        new_type = _iceberg_type(arrow_field)
        if new_type != sink_type and not promotes(new_type, sink_type):  # narrower rows are cast up on write
            changes.widenings.append((path, new_type))  # pyiceberg refuses what is not a promotion


def promotes(narrow: IcebergType, wide: IcebergType) -> bool:
    """Whether a column of type `wide` holds values of `narrow` by Iceberg's promotion (int in long, ...)."""
    try:
        promote(narrow, wide)
    except ResolveError:
        return False
    return True


def _iceberg_type(arrow_field: pa.Field) -> IcebergType:
    """The Iceberg type of an arrow field as a sink column (optional all the way down)."""
    converted = _pyarrow_to_schema_without_ids(sink_schema(pa.schema([arrow_field.remove_metadata()])))
    return converted.fields[0].field_type


def _renamed(path: tuple[str, ...], renames: list[tuple[tuple[str, ...], str]]) -> tuple[str, ...]:
    """`path` (names before the change) with the renames of its parents applied."""
    out = list(path)
    for old, new_name in renames:
        if tuple(out[: len(old)]) == old:
            out[len(old) - 1] = new_name
    return tuple(out)


def _map_added(arrow_field: pa.Field, added: NestedField, mapping: dict[int, int]) -> None:
    """Record the sink ids pyiceberg gave a newly added column (and its nested fields)."""
    source_id = source_field_id(arrow_field)
    if source_id is not None:
        mapping[source_id] = added.field_id
    arrow_type, sink_type = arrow_field.type, added.field_type
    if pa.types.is_struct(arrow_type) and isinstance(sink_type, StructType):
        for child in arrow_type:
            _map_added(child, sink_type.field_by_name(child.name) or _missing(child.name), mapping)
    elif (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and isinstance(sink_type, ListType):
        _map_added(arrow_type.value_field, sink_type.element_field, mapping)
    elif pa.types.is_map(arrow_type) and isinstance(sink_type, MapType):
        _map_added(arrow_type.key_field, sink_type.key_field, mapping)
        _map_added(arrow_type.item_field, sink_type.value_field, mapping)


def _missing(name: str) -> NestedField:
    raise SinkRejectedError(f"iceberg sink: added column {name} is missing after the schema change")


__all__ = ["SOURCE_FIELD_IDS", "evolve_by_field_id", "promotes", "source_field_id"]
