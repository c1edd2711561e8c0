"""One checkpoint store connection per store for all of a `serve` process's consumers.

Each consumer's pipeline used to open a store of its own: a replica following a hundred tables
held a hundred PostgreSQL connections, so three replicas of a few hundred tables outgrew the
server's default `max_connections` (100). The store serializes its calls with its own lock and
each call is one short transaction, so the consumers share one connection per store (and history
retention, which the store applies) and a pipeline given a store never closes it. Opened on a
consumer's first claim, closed when the service shuts down, after the leases were released.
"""

from __future__ import annotations

import logging
import threading

from icetail.kernel.errors import message_line
from icetail.monitor.engine.config import PipelineConfig
from icetail.state.store import SqlCheckpointStore, open_store

log = logging.getLogger("icetail.serve")


class SharedStores:
    """The process's open stores, by (state URL, history retention); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], SqlCheckpointStore] = {}

    def store_for(self, config: PipelineConfig) -> SqlCheckpointStore:
        """The store `config`'s consumer lives in, opened (created, migrated) on first use."""
        key = (config.state_url, config.history_retention)
        with self._lock:  # one open per store even when several consumers claim at once
            store = self._open.get(key)
            if store is None:
                store = self._open[key] = open_store(config.state_url, history_limit=config.history_retention)
            return store

    def close(self) -> None:
        with self._lock:
            stores, self._open = list(self._open.values()), {}
        for store in stores:
            try:
                store.close()
            except Exception as exc:  # noqa: BLE001 - best effort on the way out
                log.warning("could not close a checkpoint store", extra={"error": message_line(exc)})
