"""What every Spark task needs besides its split, as a frozen, picklable value."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import NameMapping, parse_mapping_from_json

from icetail.kernel.secrets import redacted_items
from icetail.reader.split.projection import arrow_schema_with_ids
from icetail.reader.split.row_filter import RowFilter, row_filter_for


@dataclass(frozen=True)
class ReadContext:
    # FileIO properties, credentials included: travel to the executors, never printed (see __repr__)
    io_properties: tuple[tuple[str, str], ...] = field(repr=False)
    output_schema_json: str  # the to-snapshot's schema: rows are projected onto it by field id
    equality_schema_json: str  # one flat field per equality-delete field id (projection.key_field), newest type
    name_mapping_json: str | None  # schema.name-mapping.default, for files written without field ids
    format_version: int
    with_schema_id: bool = False  # append `_schema_id` (metadata_columns.SCHEMA_ID) to every change row
    row_filter: str | None = None  # `--filter`: only the rows it selects change (reader/split/row_filter.py)

    def __repr__(self) -> str:
        """Credentials redacted: a repr may end up in a log, a traceback or a task description."""
        return (
            f"ReadContext(io_properties={redacted_items(self.io_properties)!r}, "
            f"format_version={self.format_version}, schema={len(self.output_schema_json)} chars)"
        )

    @property
    def output_schema(self) -> Schema:
        return _schema(self.output_schema_json)

    @property
    def output_arrow_schema(self) -> pa.Schema:
        """`output_schema` as Arrow, field ids as metadata: the data columns of every change row."""
        return _arrow(self.output_schema_json)

    @property
    def row_filter_of_output(self) -> RowFilter | None:
        """`row_filter` bound to the output schema (cached per worker), None without a filter."""
        return row_filter_for(self.row_filter, self.output_schema_json) if self.row_filter is not None else None

    @property
    def equality_schema(self) -> Schema:
        return _schema(self.equality_schema_json)

    @property
    def name_mapping(self) -> NameMapping | None:
        return _mapping(self.name_mapping_json) if self.name_mapping_json else None


@functools.lru_cache(maxsize=32)
def _schema(raw: str) -> Schema:
    return Schema.model_validate_json(raw)


@functools.lru_cache(maxsize=32)
def _arrow(raw: str) -> pa.Schema:
    return arrow_schema_with_ids(_schema(raw))


@functools.lru_cache(maxsize=8)
def _mapping(raw: str) -> NameMapping:
    return parse_mapping_from_json(raw)
