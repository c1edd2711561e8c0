"""Read one ChangeSplit: the change rows of a row-group range of one data file, chunk by chunk.

Runs inside a Spark task. For each chunk the rows visible before the snapshot (parent's
deletes applied) and after it (the snapshot's deletes applied) are compared as boolean masks:
visible before only -> DELETE, after only -> INSERT. Row groups whose masks cannot differ are
never decoded. When only a few rows of a file change (a DELETE of some of its rows), text columns
with small dictionaries are read as dictionary indices and only the kept rows become strings.
Each chunk reports the file-absolute row where the next chunk starts, which the pipeline commits
as the split's offset.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from icetail.kernel.errors import MetadataError
from icetail.kernel.lru import LRU
from icetail.kernel.model import ChangeSplit, ChangeType, DeleteContent, DeleteFileRef, FileChangeKind
from icetail.kernel.storage_errors import storage_error
from icetail.reader.split.context import ReadContext
from icetail.reader.split.deletes import deleted_positions, equality_delete_rows
from icetail.reader.split.equality import DeleteKeySet
from icetail.reader.split.fileio import file_io_for
from icetail.reader.split.metadata_columns import change_schema, with_metadata
from icetail.reader.split.projection import columns_to_read, file_schema, key_columns, project
from icetail.reader.split.row_filter import RowFilter
from icetail.reader.split.row_lineage import LINEAGE_FIELD_IDS, lineage_arrays, with_lineage_fields


@dataclass(frozen=True)
class Chunk:
    """Rows [row_start_inclusive, next_row_exclusive) of a split's file have been processed."""

    split_id: str
    row_start_inclusive: int
    next_row_exclusive: int
    batch: pa.RecordBatch | None  # change rows of this chunk (may be empty); None once staged
    rows_decoded: int
    row_groups_read: int
    bytes_read: int
    done: bool  # the last chunk of the split
    deleted_rows: int = 0  # decoded rows hidden by the delete files of the snapshot (or parent, if removed)
    staged: str | None = None  # where a Spark task wrote the rows itself (then `batch` is None)
    change_counts: tuple[tuple[str, int], ...] = ()  # rows by _change_type (what a staged chunk still carries)

    @property
    def row_count(self) -> int:
        """Change rows in the chunk, whether carried in `batch` or staged by the task."""
        if self.batch is not None:
            return self.batch.num_rows
        return sum(count for _, count in self.change_counts)


@dataclass(frozen=True)
class _DeleteState:
    """The deletes applicable on one side (before or after the snapshot) of a data file."""

    positions: np.ndarray  # sorted, file-absolute
    equality: tuple[DeleteKeySet, ...]  # one per set of equality field ids

    def visible(self, lo: int, hi: int, keys: pa.Table | None) -> np.ndarray:
        mask = np.ones(hi - lo, dtype=bool)
        first, last = np.searchsorted(self.positions, [lo, hi])
        mask[self.positions[first:last] - lo] = False
        if keys is not None:
            for key_set in self.equality:
                mask &= ~key_set.matches(keys)
        return mask


def read_split(
    context: ReadContext,
    split: ChangeSplit,
    *,
    start_row_inclusive: int = 0,
    chunk_rows: int | None = None,
    with_row_lineage: bool = False,
    end_row_exclusive: int | None = None,
    arrow_threads: bool = False,
) -> Iterator[Chunk]:
    """Chunks of change rows of `split`, starting at file row `start_row_inclusive`.

    `end_row_exclusive`: the rows from that file row on are left out (a Spark stream's rate limit cut
    the split there); the last chunk then ends there, and is `done` only if the split ends there.

    Without `chunk_rows` a chunk is one row group. `with_row_lineage`: the rows also carry
    `_row_id` and `_last_updated_sequence_number` (reader/split/row_lineage.py), after the data columns.
    `arrow_threads`: decode a row group's columns on pyarrow's thread pool. Off in a Spark task (one
    task, one core); the in-process engine turns it on, since its few split threads leave cores idle
    while a split waits for room or the last split is read (reader/local.py).
    """
    io = file_io_for(dict(context.io_properties))
    task = split.task
    data_file = task.data_file
    if data_file.file_format.upper() != "PARQUET":
        raise MetadataError(
            f"data file {data_file.path} is {data_file.file_format}; icetail reads parquet data files only"
        )
    reads_before, reads_after = task.kind != FileChangeKind.ADDED, task.kind != FileChangeKind.REMOVED
    before = _delete_state(io, context, data_file.path, task.deletes_before) if reads_before else None
    after = _delete_state(io, context, data_file.path, task.deletes_after) if reads_after else None
    equality_ids = {
        field_id
        for delete in (task.deletes_before if before else ()) + (task.deletes_after if after else ())
        if delete.content == DeleteContent.EQUALITY
        for field_id in delete.equality_field_ids
    }

    output_schema = context.output_schema
    output_arrow = context.output_arrow_schema
    out_arrow = change_schema(
        with_lineage_fields(output_arrow) if with_row_lineage else output_arrow,
        with_schema_id=context.with_schema_id,
    )
    row_filter = context.row_filter_of_output  # bound once per split, not per chunk
    stream = _open_data_file(io, data_file.path)
    with stream:
        parquet = pq.ParquetFile(stream)
        meta = parquet.metadata
        schema_of_file = _file_schema(parquet.schema_arrow, context)
        lineage_ids = set(LINEAGE_FIELD_IDS) if with_row_lineage else set()
        columns = columns_to_read(schema_of_file, set(output_schema.field_ids) | equality_ids | lineage_ids)
        key_fields = _key_fields(context.equality_schema, equality_ids)
        row_groups = _row_groups_of(split, meta.num_row_groups)
        starts = np.concatenate([[0], np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])])
        last_index = row_groups[-1] if row_groups else None
        if not equality_ids and task.kind == FileChangeKind.MODIFIED and row_groups:
            lo_all = max(int(starts[row_groups[0]]), start_row_inclusive)
            hi_all = int(starts[row_groups[-1] + 1])
            if lo_all < hi_all and _few_change(before, after, lo_all, hi_all):
                as_dictionary = _dictionary_columns(meta, row_groups, columns, parquet.schema_arrow)
                if as_dictionary:
                    parquet = pq.ParquetFile(stream, metadata=meta, read_dictionary=as_dictionary)
        if not row_groups:
            yield Chunk(split.split_id, start_row_inclusive, start_row_inclusive, _empty(out_arrow), 0, 0, 0, True)
            return
        for rg in row_groups:
            rg_lo, rg_hi = int(starts[rg]), int(starts[rg + 1])
            if rg_hi <= start_row_inclusive:
                continue
            if end_row_exclusive is not None and rg_lo >= end_row_exclusive:
                break
            if end_row_exclusive is not None and end_row_exclusive < rg_hi:
                rg_hi, last_index = end_row_exclusive, None  # cut: the split goes on after this chunk
            lo = max(rg_lo, start_row_inclusive)
            if end_row_exclusive is not None and lo >= rg_hi:  # an empty window
                break
            step = chunk_rows or (rg_hi - lo) or 1
            bounds = list(range(lo, rg_hi, step)) + [rg_hi]
            if not equality_ids and not _may_change(before, after, lo, rg_hi, task.kind):
                yield Chunk(split.split_id, lo, rg_hi, _empty(out_arrow), 0, 0, 0, rg == last_index)
                continue
            batches = parquet.iter_batches(batch_size=step, row_groups=[rg], columns=columns, use_threads=arrow_threads)
            decoded_at = rg_lo
            pending: list[pa.RecordBatch] = []
            rg_bytes = meta.row_group(rg).total_byte_size
            for chunk_lo, chunk_hi in zip(bounds[:-1], bounds[1:], strict=True):
                rows, decoded_at, decoded = _take_rows(batches, pending, decoded_at, chunk_lo, chunk_hi)
                batch, deleted_rows, counts = _changes(
                    rows,
                    chunk_lo,
                    chunk_hi,
                    before,
                    after,
                    schema_of_file,
                    output_schema,
                    output_arrow,
                    key_fields,
                    context.format_version,
                    split,
                    with_row_lineage,
                    context.with_schema_id,
                    row_filter,
                )
                yield Chunk(
                    split.split_id,
                    chunk_lo,
                    chunk_hi,
                    batch,
                    decoded,
                    1 if chunk_lo == lo else 0,
                    rg_bytes if chunk_lo == lo else 0,
                    rg == last_index and chunk_hi == rg_hi,
                    deleted_rows,
                    change_counts=counts,
                )


# Files of one table mostly share a physical schema: convert it to Iceberg once per worker.
_file_schemas: LRU[tuple[object, ...], Schema] = LRU(64)


def _file_schema(physical: pa.Schema, context: ReadContext) -> Schema:
    """`file_schema` of a parquet schema, cached by its text with field ids (the key must see them)."""
    key = (
        physical.to_string(show_field_metadata=True, show_schema_metadata=False),
        context.name_mapping_json,
        context.format_version,
    )
    cached = _file_schemas.get(key)
    if cached is None:
        cached = file_schema(physical, context.name_mapping, context.format_version)
        _file_schemas.put(key, cached)
    return cached


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def _take_rows(
    batches: Iterator[pa.RecordBatch], pending: list[pa.RecordBatch], decoded_at: int, lo: int, hi: int
) -> tuple[pa.Table, int, int]:
    """Rows [lo, hi) from the row group's batch stream; `decoded_at` is the file row after `pending`."""
    decoded = 0
    while decoded_at < hi:
        batch = next(batches)
        pending.append(batch)
        decoded_at += batch.num_rows
        decoded += batch.num_rows
    first = decoded_at - sum(b.num_rows for b in pending)
    if len(pending) == 1 and first == lo and decoded_at == hi:
        return pa.Table.from_batches([pending.pop()]), decoded_at, decoded  # the common case: no copy
    table = pa.Table.from_batches(pending)
    rows = table.slice(lo - first, hi - lo)
    rest = table.slice(hi - first)
    pending.clear()
    pending.extend(rest.to_batches())
    return rows, decoded_at, decoded


# A MODIFIED file whose change rows are at most this share of its rows (added or removed deletes
# only: a DELETE of 10% of a table) reads dictionary-encoded text columns as dictionary indices and
# materializes the strings of the kept rows only: decoding every string of a row group is then
# most of the cost of rows that are thrown away.
_DICTIONARY_OUTPUT_SHARE = 0.25
# Text chunks whose dictionary page takes at most this share of the chunk's bytes, or is at most
# this small: a larger one may have hit the writer's dictionary limit (~1 MB) and fallen back to
# plain pages, which pyarrow would hash back into a dictionary (slower, never wrong).
_DICTIONARY_PAGE_SHARE = 1 / 16
_SMALL_DICTIONARY_BYTES = 4096
_TEXT_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def _few_change(before: _DeleteState | None, after: _DeleteState | None, lo: int, hi: int) -> bool:
    """Whether at most `_DICTIONARY_OUTPUT_SHARE` of file rows [lo, hi) change (position deletes only)."""
    assert before is not None and after is not None
    changed = int((before.visible(lo, hi, None) != after.visible(lo, hi, None)).sum())
    return changed <= _DICTIONARY_OUTPUT_SHARE * (hi - lo)


def _dictionary_columns(
    meta: pq.FileMetaData, row_groups: list[int], columns: list[str], physical: pa.Schema
) -> list[str]:
    """Top-level text columns to read as dictionary: dictionary-encoded, small dictionary, in every row group."""
    text = {f.name for f in physical if f.name in columns and f.type in _TEXT_TYPES}
    for rg in row_groups:
        group = meta.row_group(rg)
        for j in range(group.num_columns):
            chunk = group.column(j)
            if chunk.path_in_schema not in text:
                continue
            dictionary_bytes = (
                chunk.data_page_offset - chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            )
            limit = max(_DICTIONARY_PAGE_SHARE * chunk.total_compressed_size, _SMALL_DICTIONARY_BYTES)
            if dictionary_bytes is None or dictionary_bytes > limit:
                text.discard(chunk.path_in_schema)
    return [name for name in columns if name in text]


def _may_change(
    before: _DeleteState | None, after: _DeleteState | None, lo: int, hi: int, kind: FileChangeKind
) -> bool:
    if kind != FileChangeKind.MODIFIED:
        return True
    assert before is not None and after is not None
    vb, va = before.visible(lo, hi, None), after.visible(lo, hi, None)
    return bool((vb != va).any())


def _changes(
    rows: pa.Table,
    lo: int,
    hi: int,
    before: _DeleteState | None,
    after: _DeleteState | None,
    schema_of_file: Schema,
    output_schema: Schema,
    output_arrow: pa.Schema,
    key_fields: tuple[NestedField, ...],
    format_version: int,
    split: ChangeSplit,
    with_row_lineage: bool,
    with_schema_id: bool = False,
    row_filter: RowFilter | None = None,
) -> tuple[pa.RecordBatch, int, tuple[tuple[str, int], ...]]:
    """The chunk's change rows, how many decoded rows the deletes hid, and the rows per change type."""
    batches = rows.to_batches() if rows.num_rows else []
    if len(batches) != 1:
        batches = rows.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=rows.schema)]
    batch = batches[0]
    keys = key_columns(batch, schema_of_file, key_fields) if key_fields else None
    n = hi - lo
    visible_before = before.visible(lo, hi, keys) if before is not None else np.zeros(n, dtype=bool)
    visible_after = after.visible(lo, hi, keys) if after is not None else np.zeros(n, dtype=bool)
    deleted = visible_before & ~visible_after
    inserted = visible_after & ~visible_before
    if row_filter is not None and (deleted.any() or inserted.any()):
        selected = row_filter.mask(project(batch, schema_of_file, row_filter.schema, format_version))
        deleted &= selected
        inserted &= selected
    lineage = lineage_arrays(batch, schema_of_file, lo, split.task.data_file) if with_row_lineage else None

    def output(keep: np.ndarray | None) -> pa.RecordBatch:
        """The rows `keep` selects (None: all), projected; filtered first, so dictionary-read text
        columns (see `_dictionary_columns`) turn into strings for the kept rows only."""
        selection = None if keep is None else pa.array(keep)
        projected = project(
            batch if selection is None else batch.filter(selection),
            schema_of_file,
            output_schema,
            format_version,
            output_arrow,
        )
        if lineage is None:
            return projected
        row_id, sequence = lineage if selection is None else (a.filter(selection) for a in lineage)
        return pa.RecordBatch.from_arrays(
            [*projected.columns, row_id, sequence], schema=with_lineage_fields(projected.schema)
        )

    commit = split.task.commit
    hidden = int((~visible_after).sum()) if after is not None else int((~visible_before).sum())
    counted = [
        (mask, change_type, count)
        for mask, change_type in ((deleted, ChangeType.DELETE), (inserted, ChangeType.INSERT))
        if (count := int(mask.sum()))
    ]
    counts = tuple((change_type.value, count) for _, change_type, count in counted)
    parts = [
        # a mask that keeps every row (a whole added or removed file) needs no filter copy
        with_metadata(output(None if count == n else mask), change_type, commit, with_schema_id=with_schema_id)
        for mask, change_type, count in counted
    ]
    if not parts:
        empty = with_metadata(output(np.zeros(n, dtype=bool)), ChangeType.INSERT, commit, with_schema_id=with_schema_id)
        return empty, hidden, counts
    if len(parts) == 1:
        return parts[0], hidden, counts
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0], hidden, counts


def _row_groups_of(split: ChangeSplit, num_row_groups: int) -> list[int]:
    """Row-group indexes of the split; if the file disagrees with its metadata, the first split reads all."""
    offsets = split.task.data_file.split_offsets
    if split.row_group_end is None:
        return list(range(split.row_group_start, num_row_groups))
    if offsets is not None and len(offsets) != num_row_groups:
        return list(range(num_row_groups)) if split.row_group_start == 0 else []
    return list(range(split.row_group_start, min(split.row_group_end, num_row_groups)))


def _key_fields(equality_schema: Schema, field_ids: set[int]) -> tuple[NestedField, ...]:
    """The key fields for `field_ids`, in the equality schema's order (one flat field per key)."""
    fields = tuple(f for f in equality_schema.fields if f.field_id in field_ids)
    missing = field_ids - {f.field_id for f in fields}
    if missing:
        raise MetadataError(f"equality delete field ids {sorted(missing)} are not fields of any table schema")
    return fields


def _delete_state(io: FileIO, context: ReadContext, data_path: str, deletes: tuple[DeleteFileRef, ...]) -> _DeleteState:
    arrays = [deleted_positions(io, d, data_path) for d in deletes if d.content != DeleteContent.EQUALITY]
    # each array is sorted already; `visible` needs sorted positions, not unique ones (a repeated
    # position clears the same mask bit twice), and np.unique cost ~25 ms per 100k positions
    if not arrays:
        positions = np.empty(0, dtype=np.int64)
    elif len(arrays) == 1:
        positions = arrays[0]
    else:
        positions = np.sort(np.concatenate(arrays))
    grouped: dict[tuple[int, ...], list[DeleteFileRef]] = defaultdict(list)
    for delete in deletes:
        if delete.content == DeleteContent.EQUALITY:
            grouped[tuple(sorted(delete.equality_field_ids))].append(delete)
    equality = tuple(_key_set(io, context, group) for group in grouped.values())
    return _DeleteState(positions, equality)


# Every data file older than an equality delete shares its key set: index it once per worker,
# not once per split (at 200k keys, building it cost more than decoding the split).
_key_sets: LRU[tuple[object, ...], DeleteKeySet] = LRU(16)


def _key_set(io: FileIO, context: ReadContext, group: list[DeleteFileRef]) -> DeleteKeySet:
    key = (
        tuple(sorted((d.path, d.content_offset or 0) for d in group)),
        context.equality_schema_json,
        context.name_mapping_json,
        context.format_version,
    )
    cached = _key_sets.get(key)
    if cached is None:
        cached = DeleteKeySet(pa.concat_tables([_equality_keys(io, context, d) for d in group]))
        _key_sets.put(key, cached)
    return cached


def _equality_keys(io: FileIO, context: ReadContext, delete: DeleteFileRef) -> pa.Table:
    rows = equality_delete_rows(io, delete)
    schema_of_file = file_schema(rows.schema, context.name_mapping, context.format_version)
    key_fields = _key_fields(context.equality_schema, set(delete.equality_field_ids))
    names = columns_to_read(schema_of_file, set(delete.equality_field_ids))
    combined = rows.select(names).combine_chunks()
    batch = combined.to_batches()[0] if combined.num_rows else pa.RecordBatch.from_pylist([], schema=combined.schema)
    return key_columns(batch, schema_of_file, key_fields)


def _open_data_file(io: FileIO, path: str):  # type: ignore[no-untyped-def]
    try:
        return io.new_input(path).open()
    except OSError as exc:
        hint = "it was deleted outside Iceberg (restore it or skip the snapshot)"
        raise storage_error(exc, "data file", path, hint=hint) from exc
