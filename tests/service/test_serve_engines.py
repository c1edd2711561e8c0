"""`serve` reads small batches in its own process and starts Spark only when a batch needs it
(issue 45): ready with no JVM, a big batch delivered on Spark exactly once while the small tables
keep delivering, the session stopped after its idle time (its JVM gone) and started again by the
next big batch.

Real processes and tables: pyiceberg tables in a SQLite catalog, `icetail serve` as a child with
a config file; the table `big` has `local_max_bytes: 0`, so each of its batches reads on Spark,
the others use the default bound. Which processes run is read from /proc (the child's session).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ID_NAME,
    NAMESPACE,
    Serve,
    Warehouse,
    free_port,
    id_name_rows,
    sample,
    wait_until,
)
from tests.support.sinks import read_parquet_sink

pytestmark = pytest.mark.once  # line-independent, a child with its own JVM starts: one line only

SMALL_TABLES = 3
IDLE_STOP = "3s"


def _jvms_of(session_id: int) -> list[int]:
    """The Java processes of a child's session (the serve process and what it launched)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        if int(fields[3]) == session_id and b"java" in command.split(b"\0")[0]:
            found.append(int(entry))
    return found


def _ids(directory: Path) -> list[int]:
    rows = read_parquet_sink(directory)
    return [] if rows is None else sorted(rows.column("id").to_pylist())


def test_serve_starts_spark_only_for_a_big_batch_and_stops_it_when_idle(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "wh")
    for i in range(SMALL_TABLES):
        warehouse.create_table(f"small{i}", ID_NAME).append(id_name_rows(range(20)))
    big = warehouse.create_table("big", ID_NAME)  # no snapshot yet: nothing for Spark to read
    sinks = tmp_path / "sinks"
    entries = "".join(
        f"  - table: {NAMESPACE}.small{i}\n    sink: parquet://{sinks}/small{i}\n" for i in range(SMALL_TABLES)
    )
    config = tmp_path / "icetail.yaml"
    config.write_text(
        f"catalog: {CATALOG_NAME}\nstate: sqlite:///{tmp_path}/state.db\ninterval: 500ms\n"
        f"spark_idle_stop: {IDLE_STOP}\ntables:\n{entries}"
        f"  - table: {NAMESPACE}.big\n    sink: parquet://{sinks}/big\n    local_max_bytes: 0\n"
    )
    port = free_port()
    env = child_env(extra={**warehouse.env(), "ICETAIL_LOCAL_MAX_BYTES": ""})
    serve = Serve(
        ["--config", str(config), "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
        env=env,
        cwd=tmp_path,
        name="serve",
        port=port,
    )
    try:
        serve.wait_status("/readyz", 200, timeout=120)
        for i in range(SMALL_TABLES):
            directory = sinks / f"small{i}"
            wait_until(lambda d=directory: _ids(d) == list(range(20)), timeout=60, what=str(directory), child=serve)
        samples = serve.samples()
        assert sample(samples, "icetail_spark_session_up") == 0
        assert sample(samples, "icetail_spark_session_starts_total") == 0
        small0 = {"table": f"{NAMESPACE}.small0", "consumer": f"{CATALOG_NAME}.{NAMESPACE}.small0"}
        assert (sample(samples, "icetail_batches_total", **small0, engine="local") or 0) >= 1
        assert _jvms_of(serve.pid) == [], "a JVM started although every batch was small"

        # a big batch: Spark starts; the small tables keep delivering meanwhile
        big.append(id_name_rows(range(100, 400)))
        warehouse.load("small0").append(id_name_rows(range(20, 30)))
        wait_until(lambda: _ids(sinks / "big") == list(range(100, 400)), timeout=180, what="big on Spark", child=serve)
        wait_until(lambda: _ids(sinks / "small0") == list(range(30)), timeout=60, what="small0 again", child=serve)
        big_labels = {"table": f"{NAMESPACE}.big", "consumer": f"{CATALOG_NAME}.{NAMESPACE}.big"}
        wait_until(  # counted once the batch's checkpoint is committed, a moment after its rows
            lambda: sample(serve.samples(), "icetail_batches_total", **big_labels, engine="spark") == 1,
            timeout=60,
            what="the big batch counted on Spark",
            child=serve,
        )
        assert sample(serve.samples(), "icetail_spark_session_starts_total") == 1

        # idle for spark_idle_stop: the session and its JVM stop
        wait_until(
            lambda: sample(serve.samples(), "icetail_spark_session_up") == 0 and not _jvms_of(serve.pid),
            timeout=90,
            what="the idle Spark session stopped, its JVM gone",
            child=serve,
        )
        # the next big batch starts a new one, and is delivered once too
        big.append(id_name_rows(range(400, 500)))
        wait_until(lambda: _ids(sinks / "big") == list(range(100, 500)), timeout=180, what="big again", child=serve)
        assert sample(serve.samples(), "icetail_spark_session_starts_total") == 2
        serve.signal(15)
        assert serve.wait(60) == 0
    finally:
        serve.kill_group()
