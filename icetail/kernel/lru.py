"""A small thread-safe least-recently-used map, for the per-process caches of planning and reading.

Everything cached here is derived from immutable files (manifests, delete files, schemas), so
an entry never goes stale; the bound only caps memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most `max_items` entries; the least recently read or written one is dropped first.

    With `weigh`, the bound is on the sum of the entries' weights instead (a manifest of 100,000
    files weighs 100,000, one of 20 weighs 20), so the cache's memory follows what it holds; an
    entry heavier than the whole bound is not kept at all.
    """

    def __init__(self, max_items: int, weigh: Callable[[V], int] | None = None) -> None:
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._max = max_items
        self._weigh = weigh
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        return None

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(value) if self._weigh is not None else 1
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            if weight > self._max:
                return
            self._items[key] = (value, weight)
            self._weight += weight
            while self._weight > self._max:
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def weight(self) -> int:
        """The sum of the entries' weights (their number without `weigh`)."""
        with self._lock:
            return self._weight
