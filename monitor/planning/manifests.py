"""Read manifest lists and manifests into frozen refs (manifest_entries.py), caching by path.

Manifests are immutable files, so a cache keyed by path is always valid; in serve mode it
makes planning one new snapshot read only that snapshot's new manifests. The manifests a
snapshot wrote are found without decoding its whole manifest list when its summary allows it
(`ManifestReader.added_in`), so that cost does not grow with the table's history.

The cache is bounded by the file entries it holds (`DEFAULT_MANIFEST_CACHE_ENTRIES`, manifest
entries plus manifest-list records), not by the number of manifests: one merged manifest can
hold 100,000 files. Manifests of a range are read `DEFAULT_PLANNING_THREADS` at a time, a bounded
window ahead of the snapshot being diffed (`added_in_each`), so memory does not grow with the
range beyond what the plan itself holds.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.errors import IcetailError, MetadataError
from icetail.kernel.lru import LRU
from icetail.kernel.settings import DEFAULT_MANIFEST_CACHE_ENTRIES
from icetail.kernel.storage_errors import StorageErrorKind, storage_error, storage_error_kind
from icetail.monitor.planning.manifest_entries import FileEntry, file_ref, first_row_ids
from icetail.reader.split.pyiceberg_compat import (
    manifest_first_row_id,
    open_manifest_list,
    read_manifest_entries,
    read_manifest_list,
)

_In = TypeVar("_In")
_Out = TypeVar("_Out")

"""File entries (and manifest-list records) a ManifestReader keeps decoded: ~0.5 KB each (R33)."""


@dataclass(frozen=True)
class ManifestCache:
    """Decoded manifests (by path) and manifest lists, bounded together by the entries they hold.

    Manifests are immutable and their paths unique, so one cache can serve every table of a
    process: `serve` shares one (`shared_manifest_cache`), so its memory is one bound however many
    tables it follows, not one bound per table (issue 24 s3; each of 50 tables could fill ~0.1 GB).
    """

    entries: LRU[str, tuple[FileEntry, ...]]
    lists: LRU[str, tuple[ManifestFile, ...]]

    @classmethod
    def bounded(cls, max_entries: int) -> ManifestCache:
        return cls(LRU(max_entries, weigh=_size), LRU(max_entries // 4, weigh=_size))

    @property
    def weight(self) -> int:
        """File entries and manifest-list records held now."""
        return self.entries.weight + self.lists.weight


_shared_caches: dict[int, ManifestCache] = {}
_shared_lock = threading.Lock()


def shared_manifest_cache(max_entries: int) -> ManifestCache:
    """The process's one cache of that bound, shared by every reader that asks for it."""
    with _shared_lock:
        cache = _shared_caches.get(max_entries)
        if cache is None:
            cache = _shared_caches[max_entries] = ManifestCache.bounded(max_entries)
        return cache


def shared_manifest_cache_weight() -> int:
    """File entries and manifest-list records held by the process's shared caches, together.

    Exported by `serve` as `icetail_manifest_cache_entries`, so a growing driver can be told apart
    from a filling cache (the cache stops at its bound; R34 could only attribute by arithmetic)."""
    with _shared_lock:
        caches = list(_shared_caches.values())
    return sum(cache.weight for cache in caches)


DEFAULT_PLANNING_THREADS = 4
"""Manifests read at once while planning a range: the waits of reads overlap (an object store's
latency per file), while decoding holds the GIL, so on a local disk it gains little."""


# Snapshot summary keys counting the files a commit added and removed (Java's SnapshotSummary,
# pyiceberg's SnapshotSummaryCollector; both leave out a key whose count is 0).
_DATA_FILE_COUNTS = ("added-data-files", "deleted-data-files")
_DELETE_FILE_COUNTS = ("added-delete-files", "removed-delete-files")
_DUPLICATE_DELETES = "deleted-duplicate-files"


def changed_file_counts(snapshot: Snapshot) -> tuple[int, int] | None:
    """(data files, delete files) that `snapshot` added or removed, by its summary.

    None when the summary cannot bound the read: no summary, a count that is not a
    non-negative integer, nothing counted (a writer that leaves the counts out looks the same as
    a commit that changed nothing), or removed duplicate entries (Java counts them apart, under
    `deleted-duplicate-files`, without saying whether they were data or delete files).
    """
    summary = snapshot.summary
    if summary is None:
        return None
    try:
        data = sum(int(summary[k] or 0) for k in _DATA_FILE_COUNTS)
        deletes = sum(int(summary[k] or 0) for k in _DELETE_FILE_COUNTS)
        duplicates = int(summary[_DUPLICATE_DELETES] or 0)
    except ValueError:
        return None
    if min(data, deletes) < 0 or duplicates != 0 or data + deletes == 0:
        return None
    return data, deletes


class ManifestReader:
    """Reads manifest lists and manifests through a FileIO, with a bounded LRU of manifests.

    `early_stop=False` makes `added_in` always decode the whole manifest list and whole manifests
    (for comparison and as a way out should a writer's snapshot summaries or manifest counts be
    wrong).
    """

    def __init__(
        self,
        io: FileIO,
        max_cached_entries: int = DEFAULT_MANIFEST_CACHE_ENTRIES,
        *,
        early_stop: bool = True,
        may_match: Callable[[DataFile], bool] | None = None,
        threads: int = DEFAULT_PLANNING_THREADS,
        cache: ManifestCache | None = None,
    ) -> None:
        """`may_match`: a row filter's file test (planning/pruning.py); the data files it rejects
        are collected in `pruned_paths` as their manifests are read (so such a reader keeps a
        cache of its own: a manifest another reader decoded would never be tested).

        `max_cached_entries` bounds the decoded manifests and manifest lists kept (by their
        entries, see `DEFAULT_MANIFEST_CACHE_ENTRIES`); 0 keeps none. `cache`: use this one
        instead (shared with other readers; `max_cached_entries` is then its bound's business).
        `threads`: manifests read at once (1: one after the other, in the caller's thread).
        """
        self._io = io
        self._early_stop = early_stop
        self._may_match = may_match
        self._threads = max(1, threads)
        self.pruned_paths: set[str] = set()
        if cache is None or may_match is not None:
            cache = ManifestCache.bounded(max_cached_entries)
        self._entries = cache.entries
        self._lists = cache.lists
        self._lock = threading.Lock()  # guards the counters
        self.manifests_read = 0  # cache misses, for planning metrics and benchmarks
        self.list_entries_read = 0  # manifest-list records decoded, for tests and benchmarks
        self.entries_decoded = 0  # manifest entries decoded, for tests and benchmarks

    def manifest_list(self, snapshot: Snapshot) -> tuple[ManifestFile, ...]:
        """Every manifest of the snapshot (its whole manifest list)."""
        key = snapshot.manifest_list
        cached = self._lists.get(key)
        if cached is not None:
            return cached
        try:
            manifests = tuple(read_manifest_list(self._io, key))
        except (OSError, ValueError) as exc:
            raise _list_error(snapshot, exc) from exc
        self._cache_list(key, manifests)
        return manifests

    def _cache_list(self, key: str, manifests: tuple[ManifestFile, ...]) -> None:
        with self._lock:
            self.list_entries_read += len(manifests)
        self._lists.put(key, manifests)

    def own_manifests(self, snapshot: Snapshot) -> tuple[ManifestFile, ...]:
        """The manifests `snapshot` wrote (`added_snapshot_id` is its id), in list order.

        Reads the manifest list only up to the last of them that holds an ADDED or DELETED entry,
        when that point can be proven; otherwise the whole list. The proof:

        - Every ADDED or DELETED entry in a manifest that S wrote is S's own: Java's
          ManifestWriter stamps `add` and `delete` with the writer's snapshot id, the merge
          (ManifestMergeManager) keeps only S's ADDED and DELETED entries as such and turns
          older ADDED ones into EXISTING, and the filter (ManifestFilterManager) writes the
          files S removes as DELETED and the rest as EXISTING. pyiceberg's producers and its
          merge manager do the same. The manifest list's `added_files_count` and
          `deleted_files_count` count exactly those entries.
        - S's summary counts the same files: Java's SnapshotSummary adds every file S's writers
          add (`added-data-files`, `added-delete-files`) and every file its filters remove
          (`deleted-data-files`, `removed-delete-files`), a repeated path inside one manifest
          under `deleted-duplicate-files` (then we read everything); pyiceberg's
          SnapshotSummaryCollector counts its added and deleted files the same way. (One
          exception: pyiceberg counts a data file that is live twice, in two manifests, once
          when it deletes both entries; the stop can then come early only if the commit also
          wrote a later manifest with changes, i.e. deleted from two partition specs at once.)

        So once the counts of S's data manifests and of its delete manifests read so far reach
        the summary's data and delete totals, every manifest after them has zero ADDED and
        DELETED entries and adds nothing to `added_in`. The whole list is read (and cached as
        whole) when the summary gives no totals, the list is not format 2 or later by its own
        header, one of S's manifests lacks a count, or the counts never meet the totals.
        """
        key = snapshot.manifest_list
        whole_list_cached = key in self._lists
        own_key = f"own:{key}"
        if not whole_list_cached and (cached_own := self._lists.get(own_key)) is not None:
            return cached_own  # a partly read list's result: a warm plan does not open the list again
        totals = changed_file_counts(snapshot) if self._early_stop and not whole_list_cached else None
        if totals is None:
            return tuple(m for m in self.manifest_list(snapshot) if m.added_snapshot_id == snapshot.snapshot_id)
        every: list[ManifestFile] = []
        own: list[ManifestFile] = []
        data = deletes = 0
        try:
            with open_manifest_list(self._io, key) as reader:
                version = reader.header.meta.get("format-version", "")
                can_stop = version.isdigit() and int(version) >= 2
                for manifest in reader:
                    every.append(manifest)
                    if manifest.added_snapshot_id != snapshot.snapshot_id:
                        continue
                    own.append(manifest)
                    added, deleted = manifest.added_files_count, manifest.deleted_files_count
                    if added is None or deleted is None:
                        can_stop = False
                        continue
                    if manifest.content == ManifestContent.DELETES:
                        deletes += added + deleted
                    else:
                        data += added + deleted
                    if can_stop and (data, deletes) == totals:
                        with self._lock:
                            self.list_entries_read += len(every)
                        self._lists.put(own_key, tuple(own))
                        return tuple(own)
        except (OSError, ValueError) as exc:
            raise _list_error(snapshot, exc) from exc
        self._cache_list(key, tuple(every))
        return tuple(own)

    def entries(self, manifest: ManifestFile) -> tuple[FileEntry, ...]:
        """Every entry of the manifest, DELETED ones included, with inherited sequence numbers and
        first row ids (`first_row_ids`)."""
        key = _entries_key(manifest)
        cached = self._entries.get(key)
        if cached is not None:
            return cached
        entries = self._read(manifest, key, None)
        self._entries.put(key, entries)
        return entries

    def changes(self, manifest: ManifestFile) -> tuple[FileEntry, ...]:
        """The ADDED and DELETED entries of the manifest (what a snapshot's diff needs), decoded
        only up to the last of them when the manifest list counts them.

        The manifest list's `added_files_count` and `deleted_files_count` of a manifest count its
        entries of status ADDED and DELETED (the spec; Java's and pyiceberg's ManifestWriter count
        each `add` and `delete`), so once that many are found every later entry is EXISTING. A
        merged manifest (Java's ManifestMergeManager writes the committing snapshot's new entries
        first, then the EXISTING ones) then costs its commit's own entries, not the 100,000 files
        it carries over; a filtered one (an overwrite) stops after its last DELETED entry. The
        order only decides how early the read stops, never what it finds. Without both counts, or
        with `early_stop=False`, the whole manifest is read (and cached as whole). The changes are
        cached apart from whole manifests, by their own count, so the cache holds a range's
        changes rather than every carried-over entry.
        """
        key = _entries_key(manifest)
        whole = self._entries.get(key)
        if whole is not None:
            return tuple(e for e in whole if e.status != ManifestEntryStatus.EXISTING)
        changes_key = f"changes:{key}"
        cached = self._entries.get(changes_key)
        if cached is not None:
            return cached
        added, deleted = manifest.added_files_count, manifest.deleted_files_count
        if not self._early_stop or added is None or deleted is None:
            return tuple(e for e in self.entries(manifest) if e.status != ManifestEntryStatus.EXISTING)
        wanted = added + deleted
        found = 0

        def last_change(entry: ManifestEntry) -> bool:
            nonlocal found
            found += entry.status != ManifestEntryStatus.EXISTING
            return found >= wanted

        read = self._read(manifest, key, last_change) if wanted > 0 else ()
        if manifest.existing_files_count is not None and len(read) == wanted + manifest.existing_files_count:
            self._entries.put(key, read)  # the prefix was the whole manifest (no EXISTING entry after it)
            return tuple(e for e in read if e.status != ManifestEntryStatus.EXISTING)
        changes = tuple(e for e in read if e.status != ManifestEntryStatus.EXISTING)
        self._entries.put(changes_key, changes)
        return changes

    def _read(
        self, manifest: ManifestFile, key: str, until: Callable[[ManifestEntry], bool] | None
    ) -> tuple[FileEntry, ...]:
        """Decode the manifest's entries (up to `until`'s entry), as FileEntry, counting the read."""
        manifest_row_id = manifest_first_row_id(manifest)
        try:
            raw = read_manifest_entries(self._io, manifest, until)
        except FileNotFoundError as exc:
            raise MetadataError(f"manifest {key} is missing; the table metadata is damaged") from exc
        except OSError as exc:
            if storage_error_kind(exc, key) in _RETRYABLE_OR_DENIED:
                raise storage_error(exc, "manifest", key) from exc
            raise MetadataError(f"manifest {key} cannot be read: {exc}") from exc
        except ValueError as exc:
            raise MetadataError(f"manifest {key} cannot be read: {exc}") from exc
        # a prefix's row ids are its own: each entry's depends only on the entries before it
        row_ids = first_row_ids(raw, manifest_row_id)
        if self._may_match is not None:
            pruned = {e.data_file.file_path for e in raw if not self._may_match(e.data_file)}
            with self._lock:
                self.pruned_paths |= pruned
        entries = tuple(
            FileEntry(
                status=e.status,
                snapshot_id=e.snapshot_id,
                file=file_ref(e.data_file, e.sequence_number if e.sequence_number is not None else 0, row_id),
            )
            for e, row_id in zip(raw, row_ids, strict=True)
        )
        with self._lock:
            self.manifests_read += 1
            self.entries_decoded += len(raw)
        return entries

    def added_in(self, snapshot: Snapshot) -> list[FileEntry]:
        """Entries that `snapshot` itself ADDED or DELETED, read from the manifests it wrote."""
        found: list[FileEntry] = []
        for manifest in self.own_manifests(snapshot):
            for entry in self.changes(manifest):
                if entry.snapshot_id == snapshot.snapshot_id:
                    found.append(entry)
        return found

    def added_in_each(self, snapshots: Sequence[Snapshot]) -> Iterator[list[FileEntry]]:
        """`added_in` of each snapshot, in order, read up to `threads` snapshots ahead."""
        return self._ordered(self.added_in, snapshots)

    def live(self, snapshot: Snapshot, content: ManifestContent) -> list[FileEntry]:
        """Live (ADDED or EXISTING) entries of one content kind at `snapshot`."""
        manifests = [m for m in self.manifest_list(snapshot) if m.content == content]
        found: list[FileEntry] = []
        for entries in self._ordered(self.entries, manifests):
            found.extend(e for e in entries if e.status != ManifestEntryStatus.DELETED)
        return found

    @property
    def cached_entries(self) -> int:
        """File entries held by the manifest cache now (for tests and benchmarks)."""
        return self._entries.weight

    def _ordered(self, read: Callable[[_In], _Out], items: Sequence[_In]) -> Iterator[_Out]:
        """`read` of each item in order; with threads, a window of 2 x threads reads runs ahead.

        The window bounds what is held at once: results are handed over in order and dropped by
        the caller, whatever the length of `items`.
        """
        if self._threads == 1 or len(items) < 2:
            yield from (read(item) for item in items)
            return
        window = 2 * self._threads
        with ThreadPoolExecutor(self._threads, thread_name_prefix="icetail-manifests") as pool:
            pending: deque[Future[_Out]] = deque()
            todo = iter(items)
            try:
                for item in islice(todo, window):
                    pending.append(pool.submit(read, item))
                while pending:
                    result = pending.popleft().result()
                    for item in islice(todo, 1):
                        pending.append(pool.submit(read, item))
                    yield result
            finally:
                for future in pending:
                    future.cancel()


def _entries_key(manifest: ManifestFile) -> str:
    """The cache key of a manifest's entries: a manifest written before a v3 upgrade gets a
    first_row_id in later lists only, so it is keyed by both."""
    row_id = manifest_first_row_id(manifest)
    return manifest.manifest_path if row_id is None else f"{manifest.manifest_path}#{row_id}"


def _size(value: tuple[Any, ...]) -> int:
    """A cached manifest's or manifest list's weight: its entries (at least 1)."""
    return max(1, len(value))


def _list_error(snapshot: Snapshot, exc: Exception) -> IcetailError:
    if isinstance(exc, FileNotFoundError):
        return MetadataError(
            f"manifest list of snapshot {snapshot.snapshot_id} is missing ({snapshot.manifest_list}); "
            "the snapshot's metadata was deleted"
        )
    if isinstance(exc, OSError) and storage_error_kind(exc, snapshot.manifest_list) in _RETRYABLE_OR_DENIED:
        return storage_error(exc, f"manifest list of snapshot {snapshot.snapshot_id}", snapshot.manifest_list)
    return MetadataError(f"manifest list of snapshot {snapshot.snapshot_id} cannot be read: {exc}")


_RETRYABLE_OR_DENIED = (StorageErrorKind.DENIED, StorageErrorKind.TRANSIENT)
