"""Each pyiceberg internal icetail uses (reader/split/pyiceberg_compat.py), tested directly: a pyiceberg upgrade
that changes one fails here by name. JVM-free: a pyiceberg-written table and a deletion-vector blob built
by hand from the spec's byte layout."""

from __future__ import annotations

import zlib

import numpy as np
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus
from pyroaring import BitMap

from icetail.reader.split.pyiceberg_compat import (
    deletion_vector_positions,
    open_manifest_list,
    optional_data_file_field,
    read_manifest_entries,
)
from tests.support.small_table import SmallTable

DV_MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])


def _dv_blob(positions: list[int]) -> bytes:
    """A deletion-vector-v1 blob (Iceberg puffin spec): length, magic, portable 64-bit roaring bitmap, CRC-32."""
    by_key: dict[int, BitMap] = {}
    for position in positions:
        by_key.setdefault(position >> 32, BitMap()).add(position & 0xFFFFFFFF)
    payload = len(by_key).to_bytes(8, "little")
    for key in sorted(by_key):
        payload += key.to_bytes(4, "little") + by_key[key].serialize()
    framed = DV_MAGIC + payload
    return len(framed).to_bytes(4, "big") + framed + zlib.crc32(framed).to_bytes(4, "big")


def test_deletion_vector_positions_decodes_one_blob() -> None:
    positions = [0, 5, 70_000, (1 << 32) + 7]
    assert sorted(deletion_vector_positions(_dv_blob(positions)).tolist()) == positions
    assert deletion_vector_positions(_dv_blob([3])).dtype == np.int64


def test_manifest_list_and_entries_are_read_with_inherited_snapshot_and_sequence(small_table: SmallTable) -> None:
    table = small_table.load()
    io = table.io
    snapshots = {s.snapshot_id: s for s in table.metadata.snapshots}
    delete_snapshot = snapshots[small_table.snapshot_ids[-1]]  # copy-on-write delete: one file out, one in
    with open_manifest_list(io, delete_snapshot.manifest_list) as reader:
        manifests = list(reader)
    assert [m.content for m in manifests] == [ManifestContent.DATA] * len(manifests)
    written = [m for m in manifests if m.added_snapshot_id == delete_snapshot.snapshot_id]
    assert written
    entries = [e for m in written for e in read_manifest_entries(io, m)]
    statuses = sorted(e.status.name for e in entries if e.snapshot_id == delete_snapshot.snapshot_id)
    assert ManifestEntryStatus.DELETED.name in statuses  # DELETED entries are returned, not skipped
    added = [e for e in entries if e.status == ManifestEntryStatus.ADDED]
    assert added and all(e.snapshot_id == delete_snapshot.snapshot_id for e in added)  # inherited
    assert all(e.sequence_number == delete_snapshot.sequence_number for e in added)
    assert all(isinstance(e.data_file, DataFile) for e in entries)


def test_optional_v3_fields_of_a_v2_data_file_are_none(small_table: SmallTable) -> None:
    table = small_table.load()
    snapshot = table.metadata.snapshots[0]
    with open_manifest_list(table.io, snapshot.manifest_list) as reader:
        manifest = next(iter(reader))
    data_file = read_manifest_entries(table.io, manifest)[0].data_file
    for v3_field in ("referenced_data_file", "content_offset", "content_size_in_bytes"):
        assert optional_data_file_field(data_file, v3_field) is None
    assert optional_data_file_field(data_file, "no_such_field") is None
    assert optional_data_file_field(data_file, "record_count") == 3


def test_deletion_vector_positions_of_an_empty_vector_and_of_empty_leading_keys() -> None:
    assert deletion_vector_positions(_dv_blob([])).tolist() == []
    # keys 0 and 1 absent: the decoder pads them with empty bitmaps, which add no positions
    positions = [(2 << 32) + 1, (2 << 32) + 9]
    assert deletion_vector_positions(_dv_blob(positions)).tolist() == positions
