"""The Debezium envelope: one record per change, `before`/`after`/`op`/`source`, as Debezium's
connectors write them, so a consumer built for Debezium reads icetail unchanged.

A change row becomes one record; an UPDATE_BEFORE and the UPDATE_AFTER next to it (update
pairing puts a pair side by side, reader/changes/reconcile.py, and never across chunks) become ONE
record with `op` "u". `op`: "c" insert, "u" update, "d" delete, "r" a row of a full start (the
rows of one snapshot read whole, `--start full`). `before` and `after` hold the data columns
(NULL on the side a change does not have); `ts_ms` is the commit time, so a replayed chunk
encodes the same bytes (Debezium's is the connector's processing time). `source`:

* `version` (icetail's), `connector` ("icetail"), `name` (the table), `ts_ms` (commit time);
* `snapshot`: "true" for a full start's rows, else "false";
* `db` (the namespace), `table`;
* `snapshot_id`, `sequence_number` (the commit's data sequence number), `change_ordinal`.

Field ids stay on the data columns, so a parquet file of envelopes still names the source's fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icetail import __version__
from icetail.kernel.errors import ConfigError
from icetail.kernel.model import ChangeType
from icetail.sinks.base import ChunkKey, GroupCommitSink, Sink
from icetail.sinks.change_columns import CHANGE_ORDINAL, CHANGE_TYPE, COMMIT_SNAPSHOT_ID, COMMIT_TIMESTAMP
from icetail.sinks.keyed.contract import GroupWriteSink, KeyedSink

CONNECTOR = "icetail"


@dataclass(frozen=True)
class EnvelopeSource:
    """What `source` says besides each row's commit: the table, and sequence numbers by snapshot id."""

    table: str  # NAMESPACE.TABLE
    sequence_numbers: Mapping[int, int]
    full_start: bool = False  # the rows are a full start's (op "r", source.snapshot "true")


def envelope_schema(change_schema: pa.Schema) -> pa.Schema:
    """The envelope records' schema for change rows of `change_schema`."""
    data = pa.struct([f for f in change_schema if not f.name.startswith("_")])
    source = pa.struct(
        [
            pa.field("version", pa.string(), nullable=False),
            pa.field("connector", pa.string(), nullable=False),
            pa.field("name", pa.string(), nullable=False),
            pa.field("ts_ms", pa.int64(), nullable=False),
            pa.field("snapshot", pa.string(), nullable=False),
            pa.field("db", pa.string(), nullable=False),
            pa.field("table", pa.string(), nullable=False),
            pa.field("snapshot_id", pa.int64(), nullable=False),
            pa.field("sequence_number", pa.int64()),
            pa.field("change_ordinal", pa.int32(), nullable=False),
        ]
    )
    return pa.schema(
        [
            pa.field("before", data),
            pa.field("after", data),
            pa.field("source", source, nullable=False),
            pa.field("op", pa.string(), nullable=False),
            pa.field("ts_ms", pa.int64(), nullable=False),
        ]
    )


def envelopes(rows: pa.Table, source: EnvelopeSource) -> pa.Table:
    """The Debezium records of change rows `rows` (icetail's changelog columns), in row order."""
    schema = envelope_schema(rows.schema)
    if not rows.num_rows:
        return schema.empty_table()
    rows = rows.combine_chunks()
    types = rows.column(CHANGE_TYPE).to_numpy(zero_copy_only=False)
    befores = np.flatnonzero(types == ChangeType.UPDATE_BEFORE.value)
    if befores.size and (
        befores[-1] + 1 >= len(types) or (types[befores + 1] != ChangeType.UPDATE_AFTER.value).any()
    ):
        raise ValueError("an UPDATE_BEFORE row is not followed by its UPDATE_AFTER")
    keep = types != ChangeType.UPDATE_AFTER.value  # an update's record is made at its UPDATE_BEFORE
    index = np.flatnonzero(keep)
    kinds = types[index]
    before_at = np.where(kinds == ChangeType.INSERT.value, -1, index)
    after_at = np.select(
        [kinds == ChangeType.DELETE.value, kinds == ChangeType.UPDATE_BEFORE.value], [-1, index + 1], index
    )
    data = _struct_of(rows, schema.field("before").type)
    op = np.select(
        [kinds == ChangeType.INSERT.value, kinds == ChangeType.DELETE.value],
        ["r" if source.full_start else "c", "d"],
        "u",
    )
    records = pa.array(index)  # the row each record is made at
    commit_ms = _epoch_ms(rows.column(COMMIT_TIMESTAMP)).take(records)
    snapshot_ids = rows.column(COMMIT_SNAPSHOT_ID).take(records).combine_chunks()
    namespace, _, table = source.table.rpartition(".")
    n = len(index)
    sequence = pa.array(
        [source.sequence_numbers.get(s) for s in snapshot_ids.to_pylist()], type=pa.int64()
    )
    source_column = pa.StructArray.from_arrays(
        [
            pa.array([__version__] * n, pa.string()),  # read once at import, not per chunk
            pa.array([CONNECTOR] * n, pa.string()),
            pa.array([source.table] * n, pa.string()),
            commit_ms,
            pa.array(["true" if source.full_start else "false"] * n, pa.string()),
            pa.array([namespace] * n, pa.string()),
            pa.array([table] * n, pa.string()),
            snapshot_ids.cast(pa.int64()),
            sequence,
            rows.column(CHANGE_ORDINAL).take(records).combine_chunks().cast(pa.int32()),
        ],
        fields=list(schema.field("source").type),
    )
    return pa.Table.from_arrays(
        [_side(data, before_at), _side(data, after_at), source_column, pa.array(op, pa.string()), commit_ms],
        schema=schema,
    )


def _side(data: pa.StructArray, at: np.ndarray) -> pa.Array:
    """The data struct of row `at[i]` for each record; NULL where `at[i]` is -1."""
    missing = at < 0
    taken = data.take(pa.array(np.where(missing, 0, at)))
    if not missing.any():
        return taken
    return pc.if_else(pa.array(missing), pa.nulls(len(at), data.type), taken)


def _struct_of(rows: pa.Table, data_type: pa.StructType) -> pa.StructArray:
    fields = list(data_type)
    return pa.StructArray.from_arrays([rows.column(f.name).combine_chunks() for f in fields], fields=fields)


def _epoch_ms(column: pa.ChunkedArray) -> pa.Array:
    as_ms = pc.cast(column, pa.timestamp("ms", tz=column.type.tz), safe=False)
    return pc.cast(as_ms, pa.int64()).combine_chunks()


@runtime_checkable
class EnvelopeOnlySink(Sink, Protocol):
    """A sink whose messages are envelopes whatever `--format` says (a message bus, nats/): its
    `write` gets the records `envelopes` makes, and `registry.formatted` always puts an EnvelopeSink
    around it."""

    envelopes_only: bool


class EnvelopeSink:
    """Writes each chunk's change rows to `inner` as Debezium envelopes (`--format debezium`).

    The pipeline tells it, per batch, the commits' sequence numbers and whether the batch is a
    full start (`prepare`); both follow from the batch as stored, so a replayed chunk encodes the
    same records. Never staged: the envelope is made in the driver, from whole chunks.
    """

    def __init__(self, inner: Sink, table: str) -> None:
        if isinstance(inner, (KeyedSink, GroupWriteSink, GroupCommitSink)):
            raise ConfigError(
                "--format debezium applies to the jsonl, stdout, parquet and callback sinks; a mirror or Iceberg "
                "sink applies the changes itself: drop --format"
            )
        self.inner = inner
        self.exactly_once = inner.exactly_once
        self._table = table
        self._sequence_numbers: dict[int, int] = {}
        self._full_start_batches: set[str] = set()

    def prepare(self, batch_id: str, sequence_numbers: Mapping[int, int], *, full_start: bool) -> None:
        self._sequence_numbers.update(sequence_numbers)
        if full_start:
            self._full_start_batches.add(batch_id)

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        source = EnvelopeSource(self._table, self._sequence_numbers, key.batch_id in self._full_start_batches)
        return self.inner.write(key, envelopes(rows, source))

    def close(self) -> None:
        self.inner.close()


def envelope_batches(batches: Iterable[pa.RecordBatch], source: EnvelopeSource) -> Iterator[pa.RecordBatch]:
    """The envelopes of a stream of change batches; an UPDATE_BEFORE that ends a batch waits for
    the UPDATE_AFTER that starts the next (a stream may cut a reconciled snapshot anywhere)."""
    held: pa.Table | None = None
    for batch in batches:
        rows = pa.Table.from_batches([batch])
        if held is not None:
            rows = pa.concat_tables([held, rows])
            held = None
        if rows.num_rows and rows.column(CHANGE_TYPE)[-1].as_py() == ChangeType.UPDATE_BEFORE.value:
            rows, held = rows.slice(0, rows.num_rows - 1), rows.slice(rows.num_rows - 1)
        if rows.num_rows:
            yield from envelopes(rows, source).to_batches()
    if held is not None:
        raise ValueError("the change stream ends with an UPDATE_BEFORE row without its UPDATE_AFTER")
