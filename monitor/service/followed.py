"""The tables a `serve` configuration's patterns name now: each pattern's namespace listed at each poll.

A table created after the start is found at the next listing and followed from then on (its
consumer created per `--start`, as any new consumer's). The set only grows: a table that is dropped
keeps its consumer, whose cycles then fail as a dropped table's always did (TableNotFoundError,
stopped after --max-failures with the reason in the store for `icetail status`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog

from icetail.kernel.errors import IcetailError, TerminalError, message_line
from icetail.monitor.engine.catalog import list_table_names, open_catalog
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.table_patterns import TablePattern

log = logging.getLogger("icetail.serve")

Lister = Callable[[str, str], tuple[str, ...]]  # (catalog name, namespace) -> the namespace's table names


@dataclass(frozen=True)
class Listing:
    """One poll of every pattern: the consumers new since the last, and why a pattern was not listed."""

    new: tuple[PipelineConfig, ...]
    errors: tuple[IcetailError, ...]


class CatalogLister:
    """Lists namespaces through pyiceberg, one catalog object per name kept across polls (a failed
    listing drops it: the next poll opens it again)."""

    def __init__(self) -> None:
        self._catalogs: dict[str, Catalog] = {}

    def __call__(self, catalog: str, namespace: str) -> tuple[str, ...]:
        if catalog not in self._catalogs:
            self._catalogs[catalog] = open_catalog(catalog)
        try:
            return list_table_names(self._catalogs[catalog], namespace)
        except IcetailError:
            self._catalogs.pop(catalog, None)
            raise


class FollowedTables:
    """Every consumer the configuration follows; `poll` adds the patterns' new tables. One thread polls."""

    def __init__(self, pipelines: Iterable[PipelineConfig], patterns: Iterable[TablePattern], lister: Lister) -> None:
        self._patterns = tuple(patterns)
        self._lister = lister
        self._known = {p.consumer_id for p in pipelines}
        self._refused: set[tuple[str, str]] = set()  # (pattern, table) whose consumer id is invalid: said once

    def poll(self) -> Listing:
        """List each pattern's namespace; a pattern that fails is reported and tried again next poll."""
        new: list[PipelineConfig] = []
        errors: list[IcetailError] = []
        for pattern in self._patterns:
            try:
                names = self._lister(pattern.catalog, pattern.namespace)
            except IcetailError as exc:
                errors.append(exc)
                continue
            for name in names:
                if pattern.matches(name) and (found := self._pipeline(pattern, name)) is not None:
                    self._known.add(found.consumer_id)
                    new.append(found)
        return Listing(tuple(new), tuple(errors))

    def _pipeline(self, pattern: TablePattern, name: str) -> PipelineConfig | None:
        """The table's settings, unless its consumer is followed already or its name makes no consumer id."""
        if (pattern.key, name) in self._refused:
            return None
        try:
            pipeline = pattern.pipeline(name)
        except TerminalError as exc:
            self._refused.add((pattern.key, name))
            log.error(
                "table not followed",
                extra={"table": f"{pattern.namespace}.{name}", "error": message_line(exc)},
            )
            return None
        return None if pipeline.consumer_id in self._known else pipeline
