"""CallbackSink, and user-defined sinks: anything with `exactly_once`, `write` and `close`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import SinkError, TerminalError
from icetail.sinks.base import ChunkKey, Sink
from icetail.sinks.python.callback import CallbackSink
from tests.sinks import change_rows, key


def test_calls_the_function_per_chunk_and_keeps_string_tokens() -> None:
    seen: list[tuple[str, int]] = []

    def collect(k: ChunkKey, rows: pa.Table) -> str | None:
        seen.append((k.name, rows.num_rows))
        return f"ok-{len(seen)}" if len(seen) == 1 else None

    sink = CallbackSink(collect)
    assert isinstance(sink, Sink) and sink.exactly_once is False
    assert sink.write(key(0), change_rows([1, 2])) == "ok-1"
    assert sink.write(key(1), change_rows([3])) is None
    assert seen == [(key(0).name, 2), (key(1).name, 1)]
    assert CallbackSink(collect, idempotent=True).exactly_once is True


def test_failures_are_transient_unless_the_callback_says_otherwise() -> None:
    def broken(k: ChunkKey, rows: pa.Table) -> None:
        raise RuntimeError("downstream\nis down")

    def refuses(k: ChunkKey, rows: pa.Table) -> None:
        raise TerminalError("bad rows")

    with pytest.raises(SinkError, match="broken failed on chunk .*RuntimeError: downstream$"):
        CallbackSink(broken).write(key(0), change_rows([1]))
    with pytest.raises(TerminalError, match="bad rows"):
        CallbackSink(refuses).write(key(0), change_rows([1]))


class SqliteTableSink:
    """The docs' user-defined sink: rows tagged with their chunk name, replaced per chunk in one transaction."""

    exactly_once = True

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS changes (chunk TEXT, id INTEGER, change_type TEXT)")

    def write(self, key: ChunkKey, rows: pa.Table) -> str | None:
        with self.db:  # one transaction: a replayed chunk replaces its own rows
            self.db.execute("DELETE FROM changes WHERE chunk = ?", (key.name,))
            self.db.executemany(
                "INSERT INTO changes VALUES (?, ?, ?)",
                [(key.name, r["id"], r["_change_type"]) for r in rows.select(["id", "_change_type"]).to_pylist()],
            )
        return key.name

    def close(self) -> None:
        self.db.close()


def test_a_user_defined_sink_satisfies_the_protocol(tmp_path: Path) -> None:
    sink = SqliteTableSink(str(tmp_path / "changes.db"))
    assert isinstance(sink, Sink)
    sink.write(key(0), change_rows([1, 2]))
    sink.write(key(1), change_rows([3]))
    sink.write(key(1), change_rows([3]))
    rows = sink.db.execute("SELECT id FROM changes ORDER BY id").fetchall()
    sink.close()
    assert rows == [(1,), (2,), (3,)]
