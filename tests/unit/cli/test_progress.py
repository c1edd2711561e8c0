"""The progress bar draws only on a terminal and counts finished splits."""

from __future__ import annotations

import io

import pyarrow as pa

from icetail.monitor.cli.progress import Progress
from icetail.reader.split.read import Chunk


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _chunk(rows: int, done: bool) -> Chunk:
    return Chunk("s", 0, rows, pa.RecordBatch.from_pydict({"a": list(range(rows))}), rows, 1, 10, done)


def test_bar_on_a_terminal() -> None:
    out = _Terminal()
    bar = Progress(2, stream=out)
    bar(_chunk(3, False))
    bar(_chunk(4, True))
    bar(_chunk(5, True))
    bar.close()
    assert "2/2 splits  12 change rows" in out.getvalue() and out.getvalue().endswith("\n")


def test_silent_off_a_terminal() -> None:
    out = io.StringIO()
    bar = Progress(None, stream=out)
    bar(_chunk(3, True))
    bar.close()
    assert out.getvalue() == ""
