"""A full local disk (icetail's handoff under TMPDIR, Spark's local directory) is one line that names
the directory and the fix, commits nothing past what was delivered, and is recovered from when
space returns: `run` resumes the batch exactly once, `serve` keeps retrying without exiting or
stopping the consumer (issue 26, resource faults).

The disk is a real tmpfs of a few MiB mounted for the test (root only; skipped otherwise), grown
with `mount -o remount,size=` when "space returns". Before the fix a full handoff surfaced as
"unexpected error: Py4JJavaError" and a Spark stack trace, or as "data file ... cannot be read".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml

from icetail.monitor.engine.api import read_changes
from tests.support.processes import child_env, run_icetail
from tests.support.serve import CATALOG_NAME, ID_NAME, NAMESPACE, Serve, Warehouse, free_port, wait_until

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SMALL = "2m"  # room for Spark's start-up scratch, not for the batch's handoff (~10 MB of rows)
ROOMY = "256m"


class SmallDisk:
    """A tmpfs mounted at `path`, resizable in place (files stay)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def resize(self, size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _random_rows(first: int, count: int) -> pa.Table:
    """Rows whose handoff does not compress: 32 random hex characters each."""
    names = [os.urandom(16).hex() for _ in range(count)]
    return pa.table({"id": np.arange(first, first + count, dtype=np.int64), "name": names}, schema=ID_NAME)


def _jsonl_ids(path: Path) -> list[int]:
    """The ids of the whole lines written so far (a line being appended is not one yet)."""
    if not path.exists():
        return []
    text = path.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line)["id"] for line in whole.splitlines()]


def _env(warehouse: Warehouse, disk: SmallDisk) -> dict[str, str]:
    return child_env(extra={**warehouse.env(), "TMPDIR": str(disk.path), "SPARK_LOCAL_DIRS": str(disk.path)})


def test_run_names_the_full_disk_in_one_line_and_resumes_exactly_once(
    tmp_path: Path, small_disk: SmallDisk, spark: Any
) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    table = warehouse.create_table("big", ID_NAME)
    table.append(_random_rows(0, 150_000))
    table.append(_random_rows(150_000, 150_000))
    sink = tmp_path / "out.jsonl"
    args = ["run", "--catalog", CATALOG_NAME, "--table", f"{NAMESPACE}.big", "--state",
            f"sqlite:///{tmp_path / 'state.db'}", "--sink", f"jsonl://{sink}", "--consumer", "full"]  # fmt: skip
    failed = run_icetail(args, _env(warehouse, small_disk), cwd=tmp_path)
    lines = [line for line in failed.stderr.splitlines() if line.startswith("icetail")]
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("icetail: error: no space left on device in "), failed.stderr[-3000:]
    assert str(small_disk.path) in lines[0] and "TMPDIR" in lines[0], lines[0]
    assert "Traceback" not in failed.stderr and "Py4J" not in failed.stderr, failed.stderr[-3000:]
    delivered_before = _jsonl_ids(sink)
    assert len(delivered_before) < 300_000  # the batch did not get through

    small_disk.resize(ROOMY)  # space returns: the same command resumes the batch where it stopped
    resumed = run_icetail(args, _env(warehouse, small_disk), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ids = _jsonl_ids(sink)
    expected = read_changes(warehouse.load("big"), spark=spark).column("id").to_pylist()
    assert sorted(ids) == sorted(expected) and len(ids) == 300_000  # nothing lost, nothing twice


def test_serve_keeps_retrying_a_full_disk_and_recovers_when_space_returns(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    table = warehouse.create_table("big", ID_NAME)
    table.append(_random_rows(0, 300_000))
    sink = tmp_path / "out.jsonl"
    port = free_port()
    config = {
        "catalog": CATALOG_NAME,
        "state": f"sqlite:///{tmp_path / 'state.db'}",
        "interval": "1s",
        "max_failures": 1,  # any other failure would stop the process at once
        "metrics_host": "127.0.0.1",
        "metrics_port": port,
        "tables": [{"table": f"{NAMESPACE}.big", "consumer": "full", "sink": f"jsonl://{sink}"}],
    }
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(config))
    serve = Serve(["--config", str(path)], env=_env(warehouse, small_disk), cwd=tmp_path, name="serve", port=port)
    try:

        def disk_full_cycles() -> int:
            return sum(
                1
                for e in serve.events()
                if e.get("msg") == "cycle failed" and "no space left on device" in str(e.get("error", ""))
            )

        wait_until(lambda: disk_full_cycles() >= 2, timeout=180, what="two cycles failed on the full disk", child=serve)
        assert serve.alive(), serve.diagnostics()  # max_failures 1, yet neither exited nor parked
        reason = serve.wait_status("/readyz", 503, 10)
        assert "waiting" in reason and "no space left on device" in reason, reason
        event = next(e for e in serve.events() if e.get("msg") == "cycle failed")
        assert str(small_disk.path) in event["error"] and "\n" not in event["error"], event

        small_disk.resize(ROOMY)
        wait_until(lambda: len(_jsonl_ids(sink)) >= 300_000, timeout=180, what="the batch delivered", child=serve)
        serve.wait_status("/readyz", 200, 60)
        serve.signal(signal.SIGTERM)
        assert serve.wait(60) == 0, serve.diagnostics()
    finally:
        serve.kill_group()
    ids = _jsonl_ids(sink)
    assert sorted(ids) == list(range(300_000))  # nothing lost, nothing twice


def test_serve_waits_out_a_full_disk_under_its_sink(tmp_path: Path, small_disk: SmallDisk) -> None:
    """The sink's disk full (not the handoff's): waited out too, not counted toward --max-failures.

    Found by the chaos harness (`serve-disk-full-sink`): the sink's ENOSPC was an ordinary transient
    failure, so a disk full for 15 s stopped a one-table service after its five failures."""
    warehouse = Warehouse(tmp_path / "wh")
    table = warehouse.create_table("small", ID_NAME)
    table.append(_random_rows(0, 2_000))
    filler = small_disk.path / "filler"
    with open(filler, "wb") as stream, pytest.raises(OSError):
        while True:
            stream.write(b"\0" * 65536)
            stream.flush()
    sink = small_disk.path / "out.jsonl"
    port = free_port()
    config = {
        "catalog": CATALOG_NAME,
        "state": f"sqlite:///{tmp_path / 'state.db'}",
        "interval": "1s",
        "max_failures": 1,  # any other failure would stop the process at once
        "metrics_host": "127.0.0.1",
        "metrics_port": port,
        "tables": [{"table": f"{NAMESPACE}.small", "consumer": "sinkfull", "sink": f"jsonl://{sink}"}],
    }
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(config))
    env = child_env(extra=warehouse.env())
    serve = Serve(["--config", str(path)], env=env, cwd=tmp_path, name="serve", port=port)
    try:

        def full_sink_cycles() -> int:
            return sum(
                1
                for e in serve.events()
                if e.get("msg") == "cycle failed" and e.get("stage") == "sink" and "disk is full" in str(e.get("error"))
            )

        wait_until(lambda: full_sink_cycles() >= 2, timeout=180, what="two cycles failed on the full sink", child=serve)
        assert serve.alive(), serve.diagnostics()
        reason = serve.wait_status("/readyz", 503, 10)
        assert "waiting" in reason, reason
        filler.unlink()  # space returns
        wait_until(lambda: len(_jsonl_ids(sink)) >= 2_000, timeout=180, what="the batch delivered", child=serve)
        serve.wait_status("/readyz", 200, 60)
        serve.signal(signal.SIGTERM)
        assert serve.wait(60) == 0, serve.diagnostics()
    finally:
        serve.kill_group()
    assert sorted(_jsonl_ids(sink)) == list(range(2_000))  # nothing lost, nothing twice
