"""Sinks that apply changes by key (mirrors) or write groups of chunks from the driver, and what
the pipeline must do for them.

A mirror keeps a target equal to the source by key, so the pipeline must pair and reconcile each
snapshot by the mirror's key: a snapshot that deletes and inserts the same key is then delivered
as one chunk (an UPDATE pair), never as a delete in one chunk and an insert in another that the
sink might apply in either order. `bind` is called once at start, before any row, with that key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from icetail.sinks.base import ChunkKey, Sink


@runtime_checkable
class KeyedSink(Sink, Protocol):
    """A sink that applies each chunk's changes by key."""

    def bind(self, key: tuple[str, ...], schema: pa.Schema) -> None:
        """Check (or prepare) the target for change rows of `schema` keyed by `key`; raise to refuse."""
        ...


@runtime_checkable
class GroupWriteSink(Sink, Protocol):
    """A driver-side sink that applies several chunks in one commit (a database transaction).

    The pipeline holds the chunks it reads (bounded by `--sink-commit-rows/--sink-commit-interval`,
    as for the Iceberg sink's staged chunks), hands them over together, and commits their offsets
    once `write_group` returned. Exactly once holds per chunk key: a replayed group, cut the same or
    differently, must leave out the chunks the sink applied before.
    """

    def write_group(self, chunks: Sequence[tuple[ChunkKey, pa.Table]]) -> list[str | None]:
        """Apply `chunks` (never empty; one batch, delivery order) durably in one commit; a token each."""
        ...


@runtime_checkable
class SparkTaskSink(Protocol):
    """A driver-side sink that can hand heavy work to Spark tasks (the Iceberg mirror's file rewrites).

    Sinks do not start Spark: the pipeline gives them its session, as a function called when
    the work needs it (the session may still be starting; the caller's scheduler pool is set).
    """

    def use_spark(self, session: Callable[[], Any]) -> None: ...
