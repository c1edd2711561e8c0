"""Which data files a row filter cannot skip: by partition values, then by column bounds.

A file is skipped only when its metadata proves that none of its rows match (pyiceberg's
inclusive projection of the filter onto the file's partition spec, then its column metrics), so
every file that holds a matching row is read: a row that matches lies in every file that holds
it, on both sides of a copy-on-write rewrite, and carry-over removal and update pairing see it
whole (reader/split/row_filter.py). Anything the evaluators cannot decide (a spec or column the
current schema no longer has, bounds of a promoted type) keeps the file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from icetail.reader.split.pyiceberg_compat import metrics_may_match
from icetail.reader.split.row_filter import parse_row_filter

log = logging.getLogger(__name__)


class FilePruner:
    """`may_match(data_file)` for one filter on one table's metadata; evaluators built once per spec."""

    def __init__(self, metadata: TableMetadata, filter_text: str) -> None:
        self._expression = parse_row_filter(filter_text)
        self._schema = metadata.schema()
        self._specs = metadata.specs()
        try:
            self._metrics: Callable[[DataFile], bool] | None = metrics_may_match(self._schema, self._expression)
        except ValueError as exc:  # a column of an older schema only (the reader checks the range's schema)
            log.debug("row filter %r does not bind to the current schema, no file is pruned: %s", filter_text, exc)
            self._metrics = None
        self._by_spec: dict[int, Callable[[DataFile], bool]] = {}

    def may_match(self, data_file: DataFile) -> bool:
        """False only if the file holds no row the filter selects (delete files always True)."""
        if data_file.content != DataFileContent.DATA or self._metrics is None:
            return True
        try:
            return self._partition_evaluator(data_file.spec_id)(data_file) and self._metrics(data_file)
        except Exception as exc:  # an undecidable file is read: pruning is an optimisation only
            log.debug("row filter cannot prune %s: %s", data_file.file_path, exc)
            return True

    def _partition_evaluator(self, spec_id: int) -> Callable[[DataFile], bool]:
        found = self._by_spec.get(spec_id)
        if found is None:
            found = _partition_evaluator(self._schema, self._specs.get(spec_id), self._expression)
            self._by_spec[spec_id] = found
        return found


def _partition_evaluator(
    schema: Schema, spec: PartitionSpec | None, expression: BooleanExpression
) -> Callable[[DataFile], bool]:
    if spec is None:
        return lambda data_file: True
    try:
        projected = inclusive_projection(schema, spec, case_sensitive=True)(expression)
        partition_type = spec.partition_type(schema)
        evaluate = expression_evaluator(Schema(*partition_type.fields), projected, case_sensitive=True)
    except Exception as exc:  # a spec on a dropped column: keep its files
        log.debug("row filter cannot prune by partition spec %s: %s", spec, exc)
        return lambda data_file: True
    return lambda data_file: evaluate(data_file.partition)
