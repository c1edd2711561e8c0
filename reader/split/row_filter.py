"""`--filter EXPR`: the change stream of the rows a filter selects, as if the table held only those.

The semantics are those of a filtered view: the changes between two snapshots are the changes
between the filtered rows of each. So a row that an UPDATE moves out of the filter is a DELETE,
one it moves in an INSERT, and an update within the filter stays an update: the filter is
applied to each row read, before carry-over removal and update pairing (reader/changes/reconcile.py).
It follows that "the previous snapshot's filtered rows plus the changes equal the next
snapshot's filtered rows", the invariant the tests check.

The filter is written in pyiceberg's expression syntax (`pyiceberg.expressions.parser`:
`id > 5 and region = 'eu'`, `name is null`, `code in ('a', 'b')`, `name like 'ab%'`), on the
top-level and nested (`a.b`) column names of the range's schema. A row for which the filter is
NULL is not selected (SQL's WHERE). Files whose partition or column bounds prove that none of
their rows match are never read (monitor/planning/pruning.py).
"""

from __future__ import annotations

import copy
import functools
import re

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import boolean_expression, parse
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.schema import Schema
from pyparsing import ParserElement

from icetail.kernel.errors import ConfigError
from icetail.reader.split.projection import field_ids_within

_EXAMPLE = "e.g. --filter \"region = 'eu' and amount > 100\""
_ROW_INDEX = "__icetail_filter_row"


def parse_row_filter(text: str, flag: str = "--filter") -> BooleanExpression:
    """The unbound expression of `text`; a syntax error is a ConfigError naming the flag.

    The error points at where the expression stops parsing, with a caret under it: pyparsing's own
    position is that of the outermost alternative to fail (character 1 for `city = `), not that of
    the furthest any part of the grammar got (`_furthest_failure`).
    """
    if not text.strip():
        raise ConfigError(f"{flag} is empty; give a row filter in pyiceberg's expression syntax, {_EXAMPLE}")
    try:
        return parse(text)
    except Exception as exc:  # pyparsing's ParseException: its text lists the whole grammar, too long to show
        where = getattr(exc, "loc", None)
        if not isinstance(where, int):  # a parse action refused a token (a LIKE pattern, say): its own words
            raise ConfigError(f"{flag} {text!r} is not a pyiceberg expression: {exc}; {_EXAMPLE}") from exc
        where = max(where, _furthest_failure(text))
        shown = re.sub(r"\s", " ", text.expandtabs())  # pyparsing counts in the tab-expanded text
        found = f"{shown[where : where + 20]!r}" if where < len(shown) else "the end"
        raise ConfigError(
            f"{flag} {text!r} is not a pyiceberg expression: it stops at character {where + 1}, at {found}; "
            f"it takes comparisons, in, is null, like, between, and/or/not, no arithmetic; {_EXAMPLE}\n"
            f"  {shown}\n  {' ' * where}^"
        ) from exc


def _furthest_failure(text: str) -> int:
    """The furthest position at which any element of pyiceberg's filter grammar failed on `text`.

    Parsed again on a copy of the grammar whose every element records where it failed (the
    grammar itself is shared module state and is left untouched). -1 if the copy parses `text`.
    """
    grammar = copy.deepcopy(boolean_expression)
    furthest = -1

    def record(_text: str, loc: int, _element: ParserElement, error: Exception) -> None:
        nonlocal furthest
        furthest = max(furthest, getattr(error, "loc", loc))

    pending, seen = [grammar], set()
    while pending:
        element = pending.pop()
        if id(element) in seen:
            continue
        seen.add(id(element))
        element.set_fail_action(record)
        pending.extend(e for e in getattr(element, "exprs", ()) if isinstance(e, ParserElement))
        inner = getattr(element, "expr", None)
        if isinstance(inner, ParserElement):
            pending.append(inner)
    try:
        grammar.parse_string(text, parse_all=True)
    except Exception:  # the failure is what is measured
        pass
    return furthest


def bind_row_filter(text: str, schema: Schema, table: str = "the table", flag: str = "--filter") -> BooleanExpression:
    """`text` parsed and bound to `schema` (names resolved to field ids); unknown columns refused."""
    expression = parse_row_filter(text, flag)
    try:
        return bind(schema, expression, case_sensitive=True)
    except ValueError as exc:
        columns = ", ".join(f.name for f in schema.fields)
        raise ConfigError(f"{flag} {text!r} does not fit {table}: {exc}; its columns are {columns}") from exc


def checked_row_filter(
    text: str | None, schema: Schema, table: str = "the table", flag: str = "--filter"
) -> str | None:
    """`text` if it parses and binds to `schema` (else ConfigError), None for no filter."""
    if text is None:
        return None
    bind_row_filter(text, schema, table, flag)
    return text


class RowFilter:
    """A filter bound to the schema rows are projected onto; evaluates to a mask per batch."""

    def __init__(self, text: str, schema: Schema) -> None:
        self.text = text
        self._bound = bind_row_filter(text, schema)
        field_ids = extract_field_ids(self._bound)
        # the top-level fields holding a referenced field: the only columns the mask needs projected
        self.schema = Schema(*[f for f in schema.fields if field_ids & field_ids_within(f)])
        self._arrow = expression_to_pyarrow(self._bound, schema) if self._bound != AlwaysTrue() else None

    def mask(self, rows: pa.RecordBatch) -> np.ndarray:
        """Whether each row of `rows` (with at least `self.schema`'s columns, by name) is selected."""
        if self._arrow is None:
            return np.ones(rows.num_rows, dtype=bool)
        indexed = pa.Table.from_batches([rows]).append_column(_ROW_INDEX, pa.array(np.arange(rows.num_rows)))
        selected = indexed.filter(self._arrow).column(_ROW_INDEX).to_numpy()
        mask = np.zeros(rows.num_rows, dtype=bool)
        mask[selected] = True
        return mask


@functools.lru_cache(maxsize=16)
def row_filter_for(text: str, schema_json: str) -> RowFilter:
    """One RowFilter per filter and schema per worker: binding costs more than a small chunk."""
    return RowFilter(text, Schema.model_validate_json(schema_json))
