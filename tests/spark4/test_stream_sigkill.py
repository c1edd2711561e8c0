"""A stream killed with SIGKILL mid-batch and restarted on its checkpoint delivers the exact change stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import icetail
from tests.spark4.support import row_counter
from tests.spark4.test_stream_source import batches_committed, sink_rows
from tests.support.source_table import SourceTable

ROOT = Path(__file__).resolve().parents[2]
PAUSE_LIMIT_S = 300  # a safety net: a healthy run reaches the seam long before


def _start(options: dict[str, str], root: Path, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, **extra_env}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark4.stream_process", json.dumps(options), str(root)],
        cwd=ROOT,
        env=env,
        stdout=(root / f"run-{len(list(root.glob('run-*')))}.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_sigkill_mid_batch_then_restart_is_exact(spark: Any, source_table: SourceTable, tmp_path: Path) -> None:
    for action in ("append", "append", "upsert", "append", "delete", "append", "overwrite"):
        source_table.commit(action)
    ids = source_table.snapshot_ids
    options = source_table.options(starting="earliest", max_snapshots_per_trigger=1)
    pause_file = tmp_path / "paused"
    victim = ids[4]  # batch 4 (one snapshot per batch) stops inside its read

    seam = {"ICETAIL_TEST_PAUSE_SNAPSHOT": str(victim), "ICETAIL_TEST_PAUSE_FILE": str(pause_file)}
    first = _start(options, tmp_path, seam)
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not pause_file.exists():
        assert first.poll() is None, (tmp_path / "run-0.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the stream never reached the pause seam"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert first.returncode == -signal.SIGKILL
    assert batches_committed(tmp_path) == 4  # batches 0..3 done, batch 4 was in flight

    second = _start(options, tmp_path, {})
    assert second.wait() == 0, (tmp_path / "run-1.log").read_text()[-3000:]
    expected = icetail.read_changes(source_table.load(), spark=spark)
    got = sink_rows(spark, tmp_path)
    assert got.num_rows == expected.num_rows
    assert row_counter(got) == row_counter(expected)
