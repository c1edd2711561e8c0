"""The checkpoint store a pipeline works on: given to it, or opened by it on first use.

Opened on first use, not when the pipeline is built: `Pipeline.open` checks the sink and the
source first, so a refused run creates no store; one it created and left without a consumer is
removed on close (issue 33.3).
"""

from __future__ import annotations

import logging

from icetail.state.store import CheckpointStore, open_store
from icetail.state.urls import new_sqlite_file, remove_sqlite_file

log = logging.getLogger("icetail.pipeline")


class StoreHandle:
    """A pipeline's checkpoint store: `store` opens (and creates) it when none was given."""

    def __init__(self, state_url: str, history_retention: int, given: CheckpointStore | None) -> None:
        self._state_url = state_url
        self._history_retention = history_retention
        self.owned = given is None
        self.opened: CheckpointStore | None = given
        self._new_file: str | None = None

    @property
    def store(self) -> CheckpointStore:
        """The checkpoint store, opened (and created when missing) on first use."""
        if self.opened is None:
            self._new_file = new_sqlite_file(self._state_url)
            self.opened = open_store(self._state_url, history_limit=self._history_retention)
        return self.opened

    def discard_if_owned(self) -> None:
        """Close the store this pipeline opened; remove its SQLite file if this pipeline created it and
        it holds no consumer and no stop: a refused first run leaves nothing behind. A given store is
        left open."""
        if not self.owned or self.opened is None:
            return
        store = self.store
        unused = False
        try:
            if self._new_file is not None:
                unused = not store.list_consumers() and not store.stopped_consumers()
        except Exception:  # noqa: BLE001 - the store is kept; the error that ended the run matters more
            log.warning("could not check whether the new checkpoint store is unused", exc_info=True)
        finally:
            store.close()
        if unused and self._new_file is not None:
            remove_sqlite_file(self._new_file)

    def abandon(self) -> None:
        """After a refused open: the store this pipeline opened is discarded and forgotten, so that
        `close` neither releases a lease through it nor discards it again."""
        if self.owned and self.opened is not None:
            self.discard_if_owned()
            self.opened = None
