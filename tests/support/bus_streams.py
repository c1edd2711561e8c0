"""What the bus sinks' tests (tests/sinks/test_nats_sink.py, test_redis_stream_sink.py,
test_rabbitmq_stream_sink.py) share: why a server cannot be used (the test skips saying so), the
tables of `id`/`v` rows they follow, and a stream's Debezium envelopes replayed in stream order onto
a snapshot's rows, which is how each checks what its stream holds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.catalogs import LocalCatalog

ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
Rows = Counter[tuple[Any, ...]]
REPO = Path(__file__).resolve().parents[2]


def unreachable(module: str, extra: str, host: str, port: int, server: str, start: str) -> str | None:
    """Why the sink cannot be tested here (its client `module` missing, nothing listening on `host:port`), or None."""
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed (pip install 'icetail[{extra}]')"
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as exc:
        return f"no {server} at {host}:{port} ({exc}); {start}"


def modules_after_parsing(url: str, modules: Sequence[str]) -> list[bool]:
    """Whether each of `modules` is imported once `url` is parsed, in a fresh interpreter."""
    code = (
        "import sys; from icetail.sinks.urls import parse_sink_url; "
        f"parse_sink_url({url!r}); print(*[m in sys.modules for m in {list(modules)!r}])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return [word == "True" for word in out.stdout.split()]


def id_v_tables(
    local: LocalCatalog, names: Iterable[str], namespace: str = "ns", properties: dict[str, str] | None = None
) -> list[Any]:
    """New tables `namespace.NAME` of rows (id, v), `id` their identifier column."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = local.catalog()
    catalog.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()), identifier_field_ids=[1]
    )
    return [catalog.create_table(f"{namespace}.{name}", schema, properties=properties or {}) for name in names]


def table_rows(table: Any, snapshot_id: int | None = None) -> Rows:
    """The (id, v) rows of `table` at `snapshot_id` (default: its current snapshot)."""
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow() if snapshot_id is not None else table.scan().to_arrow()
    return Counter(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist(), strict=True))


def replay(envelopes: Iterable[dict[str, Any]], onto: Rows | None = None) -> Rows:
    """The rows `envelopes` leave when applied in stream order onto `onto` (default: nothing, the
    snapshot before the first); an update or a delete of a row that is not there fails."""
    rows: Rows = Counter(onto or {})
    for record in envelopes:
        if record["op"] in ("u", "d"):
            before = (record["before"]["id"], record["before"]["v"])
            assert rows[before] > 0, f"{record['op']} of a row that is not there: {record}"
            rows[before] -= 1
        if record["op"] in ("c", "r", "u"):
            rows[(record["after"]["id"], record["after"]["v"])] += 1
    return +rows


def check_each_snapshot(table: Any, envelopes: Iterable[dict[str, Any]]) -> None:
    """Each snapshot's envelopes (by their `source.snapshot_id`), in stream order, replayed onto the
    previous snapshot's rows give its rows; none names a snapshot outside the table's history."""
    by_snapshot: dict[int, list[dict[str, Any]]] = {}
    for record in envelopes:
        by_snapshot.setdefault(int(record["source"]["snapshot_id"]), []).append(record)
    previous: Rows = Counter()
    for entry in table.metadata.snapshot_log:  # main's history, oldest first
        snapshot = entry.snapshot_id
        rows = table_rows(table, snapshot)
        assert replay(by_snapshot.pop(snapshot, []), previous) == rows, f"snapshot {snapshot} replayed"
        previous = rows
    assert not by_snapshot, f"envelopes of snapshots not in the table's history: {sorted(by_snapshot)}"


def refused_in_one_line(url: str, reason: str, secret: str) -> None:
    """Parsing `url` is refused with one line that says `reason` (a regex) and does not show `secret`."""
    import pytest

    from icetail.kernel.errors import ConfigError
    from icetail.sinks.urls import parse_sink_url

    with pytest.raises(ConfigError, match=reason) as caught:
        parse_sink_url(url)
    assert "\n" not in str(caught.value) and secret not in str(caught.value)
