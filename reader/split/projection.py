"""Field-id projection of file batches onto a table schema, and the key columns of equality deletes.

Renames, added fields (NULL), dropped fields and promoted types all follow from matching by
field id, at every depth of structs, lists and maps. pyiceberg converts file schemas (with the
table's name mapping for files without ids); the projection itself is ours, because pyiceberg
0.12's loses NULL lists of structs and NULL maps of structs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import pyarrow_to_schema, schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.types import (
    GeographyType,
    GeometryType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    StructType,
)

from icetail.kernel.errors import MetadataError


def file_schema(physical: pa.Schema, name_mapping: NameMapping | None, format_version: int) -> Schema:
    """The Iceberg schema of a data or delete file, from its field ids (or the table's name mapping)."""
    try:
        return pyarrow_to_schema(
            physical,
            name_mapping,
            downcast_ns_timestamp_to_us=format_version <= 2,
            format_version=format_version,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise MetadataError(f"{exc}; set the table property schema.name-mapping.default") from exc


def columns_to_read(schema_of_file: Schema, field_ids: set[int]) -> list[str]:
    """Top-level physical column names that hold any of `field_ids`, at any depth.

    A list, map or struct column is read whole: its elements are projected by id afterwards.
    """
    return [f.name for f in schema_of_file.fields if field_ids & field_ids_within(f)]


def field_ids_within(field: NestedField) -> set[int]:
    ids = {field.field_id}
    pending: list[IcebergType] = [field.field_type]
    while pending:
        current = pending.pop()
        if isinstance(current, StructType):
            ids.update(f.field_id for f in current.fields)
            pending.extend(f.field_type for f in current.fields)
        elif isinstance(current, ListType):
            ids.add(current.element_id)
            pending.append(current.element_type)
        elif isinstance(current, MapType):
            ids.update((current.key_id, current.value_id))
            pending.extend((current.key_type, current.value_type))
    return ids


def struct_path(schema: Schema, field_id: int) -> tuple[NestedField, ...] | None:
    """The fields from the top level down to `field_id` through structs; None if the schema lacks it.

    Equality-delete keys may be nested in structs but not in lists or maps (the spec's rule):
    such a key raises MetadataError naming it.
    """
    found = _find(schema.as_struct(), field_id, ())
    if found is None:
        return None
    path, in_collection = found
    if in_collection:
        raise MetadataError(
            f"equality delete field id {field_id} ({schema.find_column_name(field_id)}) is inside a list or map; "
            "the Iceberg spec allows equality keys only in structs, so the delete file is invalid"
        )
    return path


def _find(
    current: IcebergType, field_id: int, path: tuple[NestedField, ...]
) -> tuple[tuple[NestedField, ...], bool] | None:
    """(path to `field_id`, whether it runs through a list or map), depth first."""
    if isinstance(current, StructType):
        for f in current.fields:
            if f.field_id == field_id:
                return (*path, f), False
            found = _find(f.field_type, field_id, (*path, f))
            if found is not None:
                return found
        return None
    children: list[tuple[int, IcebergType]] = []
    if isinstance(current, ListType):
        children = [(current.element_id, current.element_type)]
    elif isinstance(current, MapType):
        children = [(current.key_id, current.key_type), (current.value_id, current.value_type)]
    for child_id, child_type in children:
        if child_id == field_id:
            return path, True
        found = _find(child_type, field_id, path)
        if found is not None:
            return found[0], True
    return None


def key_field(path: Sequence[NestedField]) -> NestedField:
    """The flat key field of an equality-delete field reached through the structs of `path`.

    Its name is the path of field ids ("3/17" for field 17 in struct 3): `key_columns` needs the
    ancestors to tell a NULL struct from a struct whose key field is NULL, as Java does.
    """
    return NestedField(path[-1].field_id, "/".join(str(f.field_id) for f in path), path[-1].field_type, required=False)


def key_columns(batch: pa.RecordBatch, schema_of_file: Schema, key_fields: Sequence[NestedField]) -> pa.Table:
    """Equality-key values of `batch` (read with the file's schema), as columns named by field id.

    Values are typed as `key_fields` (the newest type of each key, so a promoted int matches its
    long delete key); a key the file lacks (added later) is NULL. A key nested in structs also gets
    one validity column per enclosing struct ("17@0", ...): Java compares the projected struct,
    so a NULL struct matches only a NULL struct, never a struct whose key field is NULL.
    """
    names: list[str] = []
    columns: list[pa.Array] = []
    n = batch.num_rows
    for key in key_fields:
        ids = [int(i) for i in key.name.split("/")]
        struct: StructType | None = schema_of_file.as_struct()
        values: pa.Array | None = None
        for depth, field_id in enumerate(ids):
            found = _field_of(struct, field_id) if struct is not None else None
            if found is None:
                values, struct = None, None
            else:
                values = batch.column(found.name) if depth == 0 else pc.struct_field(values, found.name)
                struct = found.field_type if isinstance(found.field_type, StructType) else None
            if depth < len(ids) - 1:
                names.append(f"{key.field_id}@{depth}")
                columns.append(values.is_valid() if values is not None else pa.repeat(False, n))
        target = schema_to_pyarrow(Schema(key), include_field_ids=False).field(0).type
        names.append(str(key.field_id))
        if values is None:
            columns.append(pa.nulls(n, target))
        else:
            columns.append(values.cast(target) if values.type != target else values)
    return pa.table(columns, names=names)


def project(
    batch: pa.RecordBatch,
    schema_of_file: Schema,
    requested: Schema,
    format_version: int,
    target: pa.Schema | None = None,
) -> pa.RecordBatch:
    """`batch` (read with the file's schema) as `requested`, matched by field id at every depth.

    Renamed fields follow their id, fields the file lacks read as NULL (or their initial default),
    promoted types are cast, and NULL lists, maps and structs stay NULL at every level (pyiceberg
    0.12's projection turns a NULL list of structs or map of structs into an empty one).
    `target`: `requested` as Arrow when the caller has it (with or without field ids), so a reader
    projecting chunk after chunk converts the schema once, not per chunk.
    """
    file_struct = schema_of_file.as_struct()
    if target is None:
        target = arrow_schema(requested)
    downcast = format_version <= 2
    arrays = []
    for field, arrow_field in zip(requested.fields, target, strict=True):
        partner = _field_of(file_struct, field.field_id)
        column = batch.column(partner.name) if partner is not None else None
        arrays.append(_project(column, partner, field, arrow_field.type, batch.num_rows, downcast))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _field_of(struct: StructType, field_id: int) -> NestedField | None:
    return next((f for f in struct.fields if f.field_id == field_id), None)


def _project(
    array: pa.Array | None,
    file_field: NestedField | None,
    field: NestedField,
    target: pa.DataType,
    length: int,
    downcast_ns: bool,
) -> pa.Array:
    """One array of the file (None: the file lacks the field) shaped as `field`, typed `target`."""
    if array is None or file_field is None:
        if field.initial_default is not None:
            return pa.repeat(pa.scalar(field.initial_default, target), length)
        return pa.nulls(length, target)
    kind, file_kind = field.field_type, file_field.field_type
    if isinstance(kind, StructType) and isinstance(file_kind, StructType):
        children = []
        for child, arrow_child in zip(kind.fields, list(target), strict=True):
            partner = _field_of(file_kind, child.field_id)
            values = array.field(partner.name) if partner is not None else None
            children.append(_project(values, partner, child, arrow_child.type, len(array), downcast_ns))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=_nulls(array))
    if isinstance(kind, ListType) and isinstance(file_kind, ListType):
        values = _project(
            array.values, file_kind.element_field, kind.element_field, target.value_type, len(array.values), downcast_ns
        )
        factory = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        offsets = _offsets(array).cast(pa.int64() if factory is pa.LargeListArray else pa.int32())
        return factory.from_arrays(offsets, values, type=target, mask=_nulls(array))
    if isinstance(kind, MapType) and isinstance(file_kind, MapType):
        keys = _project(array.keys, file_kind.key_field, kind.key_field, target.key_type, len(array.keys), downcast_ns)
        items = _project(
            array.items, file_kind.value_field, kind.value_field, target.item_type, len(array.items), downcast_ns
        )
        return pa.MapArray.from_arrays(_offsets(array), keys, items, type=target, mask=_nulls(array))
    if array.type == target:
        return array
    if downcast_ns and pa.types.is_timestamp(array.type) and array.type.unit == "ns":
        return array.cast(target, safe=False)  # v1/v2 have no nanosecond type: Iceberg readers truncate to us
    return array.cast(target)


def _offsets(array: pa.Array) -> pa.Array:
    """The offsets of a list or map array, into its unsliced children, as an unsliced array.

    Arrow rebuilds a list with a validity mask only from offsets that start at buffer offset 0;
    a chunk is a slice of a row group, so its offsets usually do not.
    """
    offsets = array.offsets
    return pa.concat_arrays([offsets]) if offsets.offset else offsets


def _nulls(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


UNREADABLE_TYPES = (GeometryType, GeographyType)


def check_readable(schema: Schema, table_name: str) -> None:
    """Refuse, before anything is read, a schema holding a type icetail cannot deliver.

    Geometry and geography (v3) have no reader in pyiceberg 0.12 and no change semantics to test
    against Java here; `unknown` columns are fine (always NULL, as the spec says).
    """
    for field_id in sorted(schema.field_ids):
        field = schema.find_field(field_id)
        if isinstance(field.field_type, UNREADABLE_TYPES):
            raise MetadataError(
                f"table {table_name}: column {schema.find_column_name(field_id)} has type {field.field_type}, "
                "which icetail cannot read yet; follow a table without geometry or geography columns"
            )


def arrow_schema(schema: Schema) -> pa.Schema:
    return schema_to_pyarrow(schema, include_field_ids=False)


def arrow_schema_with_ids(schema: Schema) -> pa.Schema:
    """`arrow_schema` with each field's Iceberg id as `PARQUET:field_id` metadata: the data columns of
    change rows carry the source table's field ids, so the parquet sink's files keep them and the
    Iceberg sink evolves its table by id (a renamed column keeps its id)."""
    return schema_to_pyarrow(schema, include_field_ids=True)
