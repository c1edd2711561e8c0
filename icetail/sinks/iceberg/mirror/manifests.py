"""The Iceberg mirror's manifests: what each overwrite carries over, so that a group's cost does not
grow with the number of groups applied before it.

Why: each group's overwrite (pyiceberg 0.12 `_OverwriteFiles`) writes a manifest of its added files
and one of the entries it deleted, and carries every manifest of the parent on. A manifest that
holds only DELETED entries of an earlier snapshot lists no live file, yet pyiceberg carries it
forever, and every later plan and commit opens it: measured, +2 manifests a group and +2.7 ms a
manifest for each later group (1.1 s a one-key group after 200 groups). Java drops such manifests;
so does the mirror (`carry_live_only`). The delete manifest of the snapshot itself stays in that
snapshot (an incremental reader of the target sees its deletes).

The added manifests are live and still one a group: pyiceberg merges manifests only in a merge
append. With the target's `commit.manifest-merge.enabled=true` (set on a target the mirror
creates) the mirror merges them as a merge append would (pyiceberg's own merge manager, with the
table's `commit.manifest.min-count-to-merge` and `commit.manifest.target-size-bytes`): a merged
manifest keeps this snapshot's added and deleted entries as they are and the rest as EXISTING, and
drops earlier DELETED entries.

Both hook into the producer pyiceberg hands the transaction step (its `_existing_manifests` and
`_process_manifests`, the extension points its merge append uses), pinned by the tests in
tests/sinks/test_iceberg_mirror.py.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import TableProperties
from pyiceberg.table.update.snapshot import _ManifestMergeManager
from pyiceberg.utils.properties import property_as_bool, property_as_int


def carry_live_only(producer: Any) -> None:
    """Make the overwrite `producer` leave out carried manifests without a live (added or existing) file,
    and merge its manifests when the table asks for it."""
    carried = producer._existing_manifests

    def live() -> list[ManifestFile]:
        return [m for m in carried() if m.has_added_files() or m.has_existing_files()]

    producer._existing_manifests = live
    properties = producer._transaction.table_metadata.properties
    enabled = property_as_bool(
        properties, TableProperties.MANIFEST_MERGE_ENABLED, TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT
    )
    if not enabled:
        return
    manager = _ManifestMergeManager(
        target_size_bytes=property_as_int(  # type: ignore[arg-type]
            properties, TableProperties.MANIFEST_TARGET_SIZE_BYTES, TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
        ),
        min_count_to_merge=property_as_int(  # type: ignore[arg-type]
            properties, TableProperties.MANIFEST_MIN_MERGE_COUNT, TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT
        ),
        merge_enabled=True,
        snapshot_producer=producer,
    )

    def merged(manifests: list[ManifestFile]) -> list[ManifestFile]:
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        return manager.merge_manifests(data) + [m for m in manifests if m.content != ManifestContent.DATA]

    producer._process_manifests = merged
