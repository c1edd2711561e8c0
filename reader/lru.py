"""A small thread-safe least-recently-used map, for the per-process caches of planning and reading.

Everything cached here is derived from immutable files (manifests, delete files, schemas), so
an entry never goes stale; the bound only caps memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most `max_items` entries; the least recently read or written one is dropped first."""

    def __init__(self, max_items: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._max = max_items
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self._max:
                self._items.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items
