"""Sinks that apply changes by key (mirrors), and what the pipeline must do for them.

A mirror keeps a target equal to the source by key, so the pipeline must pair and reconcile each
snapshot by the mirror's key: a snapshot that deletes and inserts the same key is then delivered
as one chunk (an UPDATE pair), never as a delete in one chunk and an insert in another that the
sink might apply in either order. `bind` is called once at start, before any row, with that key.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa

from icetail.sinks.base import Sink


@runtime_checkable
class KeyedSink(Sink, Protocol):
    """A sink that applies each chunk's changes by key."""

    def bind(self, key: tuple[str, ...], schema: pa.Schema) -> None:
        """Check (or prepare) the target for change rows of `schema` keyed by `key`; raise to refuse."""
        ...
