"""The keys of a chunk's Debezium envelope records, as every bus sink carries them (`key=` in its URL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icetail.kernel.errors import SinkRejectedError


def record_key_values(records: pa.Table, columns: Sequence[str], sink: str) -> list[list[Any]]:
    """Each record's key values: of `after`, or of `before` for a delete; `sink` names the sink in
    the one-line refusal of a key column the table does not have."""
    after = records.column("after").combine_chunks()
    before = records.column("before").combine_chunks()
    names = {f.name for f in after.type}
    missing = [c for c in columns if c not in names]
    if missing:
        raise SinkRejectedError(
            f"{sink}: key column(s) {', '.join(missing)} not in the table's columns ({', '.join(sorted(names))}); "
            "fix key= in the sink URL"
        )
    has_after = after.is_valid()
    values = [pc.if_else(has_after, after.field(c), before.field(c)).to_pylist() for c in columns]
    return [list(v) for v in zip(*values, strict=True)]
