"""A full disk under a sink names itself and its fix in the one error line, and is transient.

Found by the chaos harness (issue 26, `disk-full-sink`): the line was the bare OS text
(`OSError: [Errno 28] No space left on device`). /dev/full is a real device that refuses every
write with ENOSPC, so no filesystem has to be filled (or mounted) for the sink's part.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import DISK_FULL_HINT, SinkError, TransientError, error_text
from icetail.sinks.base import ChunkKey
from icetail.sinks.files.jsonl import JsonlFileSink

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")


def test_a_jsonl_sink_on_a_full_disk_says_so_in_one_line() -> None:
    sink = JsonlFileSink("/dev/full", consumer="c1")
    try:
        with pytest.raises(SinkError) as info:
            sink.write(ChunkKey("c1", "b000001-0123abcd-c0-o0-n1", 0, "s0", 0), pa.table({"id": [1, 2, 3]}))
    finally:
        sink.close()
    message = str(info.value)
    assert isinstance(info.value, TransientError)
    assert "\n" not in message
    assert message.endswith(DISK_FULL_HINT), message
    assert "No space left on device" in message


def test_error_text_of_a_real_enospc_and_of_texts_that_carry_it() -> None:
    with pytest.raises(OSError) as info, open("/dev/full", "wb", buffering=0) as f:
        f.write(b"x")
    assert error_text(info.value).endswith(DISK_FULL_HINT)
    # as a Spark task passes pyarrow's error on (no errno), and as SQLite says it
    assert error_text(OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")).endswith(
        DISK_FULL_HINT
    )
    assert DISK_FULL_HINT in error_text(RuntimeError("database or disk is full"))
    assert error_text(OSError("Connection reset by peer")) == "OSError: Connection reset by peer"


def test_a_failed_append_leaves_whole_lines_and_the_next_one_appends_cleanly(tmp_path: Path) -> None:
    """The disk fills in the middle of a chunk: the partial line is cut at once, the buffered rest is
    dropped (close() no longer raises it), and once space is back a retry in this process appends
    after whole lines only. Needs a small filesystem to fill (tmpfs, root)."""
    if os.geteuid() != 0:
        pytest.skip("a small filesystem to fill needs root (mount -t tmpfs)")
    disk = tmp_path / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mount -t tmpfs refused here")
    try:
        sink = JsonlFileSink(disk / "changes.jsonl", consumer="c1")
        key = ChunkKey("c1", "b000001-0123abcd-c0-o0-n1", 0, "s0", 0)
        sink.write(key, pa.table({"id": [1, 2]}))
        before = (disk / "changes.jsonl").read_bytes()
        filler = disk / "filler"
        with contextlib.suppress(OSError), open(filler, "wb") as f:
            f.write(b"\0" * ((1 << 20) - 30_000))  # about 30 kB left
        big = pa.table({"id": list(range(20_000)), "name": [f"row-{i}" for i in range(20_000)]})
        with pytest.raises(SinkError, match="disk is full"):
            sink.write(ChunkKey("c1", "b000001-0123abcd-c0-o0-n1", 1, "s1", 0), big)
        assert (disk / "changes.jsonl").read_bytes() == before  # no torn line left behind
        filler.unlink()
        sink.write(ChunkKey("c1", "b000001-0123abcd-c0-o0-n1", 1, "s1", 0), pa.table({"id": [3]}))
        sink.close()
        lines = (disk / "changes.jsonl").read_bytes().split(b"\n")
        assert lines[-1] == b"" and [json.loads(line)["id"] for line in lines[:-1]] == [1, 2, 3]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
