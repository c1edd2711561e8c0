"""`icetail serve` as a real process on a real table: health, delivery, metrics, JSON logs,
SIGTERM in the middle of a batch, restart, and a failing consumer that exhausts its retries.

The table is a pyiceberg SqlCatalog on SQLite in tmp_path; the child sees it through
PYICEBERG_CATALOG__SVC__* variables. The oracle is `icetail.monitor.engine.api.read_changes` over the whole
history, computed in the test process.

The lifecycle is one test over two serve processes (JVM startups dominate the run time):
1. start, /healthz, /readyz; 2. appends, a delete and an overwrite while it runs, metrics and
"batch delivered" events against the sink; 3. SIGTERM while a many-chunk batch is delivered,
exit 0; 4. restart, the batch resumes, sink == read_changes; 5. the table is dropped, the
consumer fails with backoff and the process exits 1 after --max-failures.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import GreaterThanOrEqual, LessThan
from pyiceberg.table import Table

from icetail.kernel.model import ChangeType
from icetail.monitor.engine.api import read_changes
from icetail.monitor.service.metrics import FailureStage
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, HOLD_SESSION_START_ENV, hold_env
from tests.support.processes import child_env
from tests.support.serve import (
    CATALOG_NAME,
    ID_NAME,
    NAMESPACE,
    Child,
    Samples,
    Serve,
    Warehouse,
    assert_same_rows,
    counts_by_type,
    free_port,
    http_get,
    id_name_rows,
    parse_samples,
    sample,
    sink_rows,
    wait_until,
)

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

SCHEMA = ID_NAME
TABLE = f"{NAMESPACE}.events"
CONSUMER = f"{CATALOG_NAME}.{TABLE}"  # the default consumer id: CATALOG.NS.TABLE
LABELS = {"table": TABLE, "consumer": CONSUMER}
ROW_GROUP_ROWS = 10_000
BIG_ROWS = 150_000
BIG_FILES = 5

STARTUP_SECONDS = 90.0  # JVM start and the first batch (Python workers) on a 2-core machine
CATCH_UP_SECONDS = 60.0
# A guard against a hang, not a bound the product promises: on SIGTERM serve waits for the batches
# in flight up to its shutdown_timeout (30 s by default), then releases its leases and stops its JVM,
# so on a busy machine an exit may take longer than 30 s without anything wrong (issue 47)
EXIT_SECONDS = 300.0

# <consumer>-<batch id>-<split index>-<first row>.parquet (icetail.sinks.base.ChunkKey.name)
CHUNK_FILE = re.compile(
    r"^(?P<consumer>.+)-(?P<batch>b\d{6}-[0-9a-f]{8}-c\d+-o\d+-n\d+)-(?P<split>\d{6})-(?P<row>\d{12})\.parquet$"
)


def rows(ids: range, tag: str = "v") -> pa.Table:
    return id_name_rows(ids, tag)


def serve_args(tmp_path: Path, port: int, *extra: str) -> list[str]:
    return [
        "--catalog",
        CATALOG_NAME,
        "--table",
        TABLE,
        "--state",
        f"sqlite:///{tmp_path / 'state.db'}",
        "--sink",
        f"parquet://{tmp_path / 'sink'}",
        "--interval",
        "1s",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        str(port),
        *extra,
    ]


def start_serve(
    tmp_path: Path,
    warehouse: Warehouse,
    children: list[Child],
    name: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> Serve:
    port = free_port()
    serve = Serve(
        serve_args(tmp_path, port, *extra),
        env=child_env(extra={**warehouse.env(), **(env or {})}),
        cwd=tmp_path,
        name=name,
        port=port,
    )
    children.append(serve)
    return serve


def wait_caught_up(serve: Serve, table: Table) -> Samples:
    """Wait until the consumer's cursor is the table's current snapshot and lag is 0."""
    current = table.metadata.current_snapshot()
    assert current is not None
    want = current.timestamp_ms / 1000

    def probe() -> Samples | None:
        samples = serve.samples()
        cursor = sample(samples, "icetail_cursor_commit_timestamp_seconds", **LABELS)
        lag = sample(samples, "icetail_lag_snapshots", **LABELS)
        if cursor is not None and abs(cursor - want) < 1e-6 and lag == 0:
            return samples
        return None

    return wait_until(probe, timeout=CATCH_UP_SECONDS, what=f"cursor at snapshot {current.snapshot_id}", child=serve)


def emitted(samples: Samples) -> dict[str, int]:
    out = {}
    for change_type in ChangeType:
        value = sample(samples, "icetail_rows_emitted_total", change_type=change_type.value, **LABELS)
        assert value is not None, f"icetail_rows_emitted_total{{change_type={change_type.value}}} missing"
        if value:
            out[change_type.value] = int(value)
    return out


def sink_files(sink: Path) -> dict[str, list[Path]]:
    """Committed chunk files of the sink by batch id."""
    out: dict[str, list[Path]] = {}
    for path in sorted(sink.glob("*.parquet")):
        match = CHUNK_FILE.match(path.name)
        assert match, f"unexpected file in the sink: {path.name}"
        assert match["consumer"] == CONSUMER
        out.setdefault(match["batch"], []).append(path)
    return out


def rows_in(paths: list[Path]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for path in paths:
        counts.update(pq.read_table(path, columns=["_change_type"]).column(0).to_pylist())
    return dict(counts)


def batch_events(serve: Serve, msg: str = "batch delivered") -> list[dict[str, Any]]:
    return [e for e in serve.events() if e.get("msg") == msg and e.get("consumer") == CONSUMER]


def assert_sink_equals_history(sink: Path, table: Table, spark: Any) -> pa.Table:
    """The sink holds exactly `read_changes` of the whole history: the same multiset of full rows."""
    expected = read_changes(table, spark=spark)
    got = sink_rows(sink)
    assert got.num_rows == expected.num_rows, (counts_by_type(got), counts_by_type(expected))
    assert_same_rows(got, expected)
    return expected


def test_serve_lifecycle_delivery_metrics_logs_sigterm_restart_and_failures(
    tmp_path: Path, warehouse: Warehouse, children: list[Child], spark: Any
) -> None:
    table = warehouse.create_table("events", SCHEMA, {"write.parquet.row-group-limit": str(ROW_GROUP_ROWS)})
    table.append(rows(range(5)))
    sink = tmp_path / "sink"

    # --- 1. start, health, first batch -------------------------------------------------------
    hold = tmp_path / "hold-after-chunk"  # while it exists, serve1 waits for SIGTERM after a chunk
    serve = start_serve(tmp_path, warehouse, children, "serve1", env=hold_env(HOLD_AFTER_CHUNK_ENV, hold))
    assert serve.wait_status("/healthz", 200, STARTUP_SECONDS).strip() == "ok"
    assert serve.wait_status("/readyz", 200, STARTUP_SECONDS).strip() == "ok"
    wait_caught_up(serve, warehouse.load("events"))

    # --- 2. snapshots of every kind while it runs -------------------------------------------
    table = warehouse.load("events")
    table.append(rows(range(5, 9)))
    table.append(rows(range(9, 15)))
    table.delete(LessThan("id", 3))  # copy-on-write: DELETEs (the rest of the file is carry-over)
    table.overwrite(rows(range(12, 14), tag="new"), overwrite_filter=GreaterThanOrEqual("id", 12))
    table = warehouse.load("events")
    samples = wait_caught_up(serve, table)

    # the oracle is read once, at the end; here the metrics must agree with the sink
    phase2_snapshots = {s.snapshot_id for s in table.metadata.snapshots}
    by_type = counts_by_type(sink_rows(sink))
    assert set(by_type) == {"INSERT", "DELETE"}
    assert emitted(samples) == by_type
    assert sample(samples, "icetail_consecutive_failures", **LABELS) == 0
    failures = {st.value: sample(samples, "icetail_failures_total", stage=st.value, **LABELS) for st in FailureStage}
    assert failures == {st.value: 0.0 for st in FailureStage}

    # one "batch delivered" event per batch: a chain of snapshot ranges over the whole history,
    # each batch's rows as in its sink files
    events = batch_events(serve)
    assert len({e["batch_id"] for e in events}) == len(events)
    assert sample(samples, "icetail_batch_duration_seconds_count", **LABELS) == len(events)
    assert events[0]["from_snapshot_exclusive"] is None
    assert events[0]["to_snapshot_inclusive"] == table.metadata.snapshots[0].snapshot_id
    for before, after in zip(events, events[1:], strict=False):
        assert after["from_snapshot_exclusive"] == before["to_snapshot_inclusive"]
    assert events[-1]["to_snapshot_inclusive"] == table.metadata.current_snapshot_id
    files = sink_files(sink)
    for event in events:
        assert event["level"] == "info" and event["table"] == TABLE and event["resumed"] is False
        assert event["rows"] == rows_in(files.get(event["batch_id"], []))
        datetime.datetime.fromisoformat(event["ts"])
    assert set(files) <= {e["batch_id"] for e in events}
    assert sum((Counter(e["rows"]) for e in events), Counter()) == Counter(by_type)

    # --- 3. SIGTERM while a large batch is being delivered ----------------------------------
    delivered = set(files)
    big = rows(range(1_000, 1_000 + BIG_ROWS))
    with table.transaction() as tx:  # several files of many row groups: many chunks
        tx.set_properties({"write.target-file-size-bytes": str(big.nbytes // BIG_FILES + 1)})
    table = warehouse.load("events")
    hold.touch()  # the batch of `big` stops after its first chunk until SIGTERM: no race with the signal
    table.append(big)
    table = warehouse.load("events")
    big_snapshot = table.metadata.current_snapshot_id
    assert len(table.inspect.files()) >= BIG_FILES

    def first_big_chunk() -> str | None:
        fresh = [b for b in sink_files(sink) if b not in delivered]
        return fresh[0] if fresh else None

    big_batch = wait_until(first_big_chunk, timeout=CATCH_UP_SECONDS, interval=0.01, what="first chunk", child=serve)
    serve.signal(signal.SIGTERM)
    assert serve.wait(EXIT_SECONDS) == 0, serve.diagnostics()  # a bound against hanging, not a measurement
    # the JVM goes with it: nothing of the process group is left behind
    wait_until(lambda: not serve.group_alive(), timeout=EXIT_SECONDS, what="the JVM of serve1 to exit")

    log = serve.events()
    assert any(e.get("msg") == "stop requested" and e.get("signal") == "SIGTERM" for e in log)
    interrupted = batch_events(serve, "batch interrupted")
    assert [e["batch_id"] for e in interrupted] == [big_batch], "the batch must stop part way"
    assert interrupted[0]["to_snapshot_inclusive"] == big_snapshot
    assert big_batch not in {e["batch_id"] for e in batch_events(serve)}
    partial = rows_in(sink_files(sink)[big_batch])
    assert partial == interrupted[0]["rows"]
    assert 0 < partial["INSERT"] < BIG_ROWS
    assert not (sink / "_tmp" / CONSUMER).exists() or not any((sink / "_tmp" / CONSUMER).iterdir())

    # --- 4. restart: the interrupted batch resumes, nothing lost, nothing twice --------------
    again = start_serve(tmp_path, warehouse, children, "serve2", "--max-failures", "3")
    again.wait_status("/readyz", 200, STARTUP_SECONDS)
    samples = wait_caught_up(again, table)
    resumed = batch_events(again)
    assert [(e["batch_id"], e["resumed"]) for e in resumed] == [(big_batch, True)]
    assert Counter(interrupted[0]["rows"]) + Counter(resumed[0]["rows"]) == Counter({"INSERT": BIG_ROWS})
    assert emitted(samples) == resumed[0]["rows"]
    expected = assert_sink_equals_history(sink, table, spark)
    early = expected.filter(pc.is_in(expected.column("_commit_snapshot_id"), pa.array(sorted(phase2_snapshots))))
    assert counts_by_type(early) == by_type  # what serve1's metrics said before the large batch
    assert counts_by_type(expected) == {**by_type, "INSERT": by_type["INSERT"] + BIG_ROWS}
    assert rows_in(sink_files(sink)[big_batch]) == {"INSERT": BIG_ROWS}

    # --- 5. the table is dropped: the consumer fails, backs off, and the process exits 1 -----
    warehouse.catalog.drop_table(TABLE)
    assert_fails_with_backoff(again, max_failures=3)


def assert_fails_with_backoff(serve: Serve, max_failures: int) -> None:
    """The consumer's table is gone: `max_failures` logged failures with backoff, then exit 1."""
    seen: list[float] = []  # icetail_failures_total{stage="catalog"} while the process lives
    while serve.alive():
        try:
            samples = serve.samples()
        except AssertionError:
            break  # the endpoint went away: the process is on its way out
        value = sample(samples, "icetail_failures_total", stage="catalog", **LABELS)
        assert value is not None
        seen.append(value)
        time.sleep(0.1)
    assert serve.wait(EXIT_SECONDS) == 1, serve.diagnostics()
    # the counter only grows and never passes the failures logged. Which values a 0.1 s poll
    # catches depends on the machine's load, so none is required (that was a race); the count per
    # failure is checked deterministically in tests/service/test_metrics_http.py, the retries below.
    assert seen == sorted(seen) and set(seen) <= set(range(max_failures + 1)), seen

    log = serve.events()
    failed = [e for e in log if e.get("msg") == "cycle failed"]
    assert [e["consecutive_failures"] for e in failed] == list(range(1, max_failures + 1)), serve.diagnostics()
    for event in failed:
        assert event["level"] == "error" and event["consumer"] == CONSUMER
        assert event["stage"] == "catalog" and event["terminal"] is True
        assert f"table '{TABLE}' does not exist" in event["error"]  # the cause, in every failure
    assert [e["retry_in_seconds"] for e in failed] == [2.0**i for i in range(max_failures)]  # interval 1s
    at = [datetime.datetime.fromisoformat(e["ts"]) for e in failed]
    gaps = [(b - a).total_seconds() for a, b in zip(at, at[1:], strict=False)]
    assert all(gap >= 2.0**i - 0.05 for i, gap in enumerate(gaps)), gaps  # the backoff was respected
    fatal = [e for e in log if e.get("msg") == "exiting after repeated failures"]
    assert len(fatal) == 1 and "does not exist" in fatal[0]["reason"]


def make_service(tmp_path: Path, warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    """A Service on the test's SparkSession (no extra JVM), following ns.events; not started."""
    import pyiceberg.catalog
    from pyiceberg.utils.config import Config

    from icetail.monitor.engine.config import PipelineConfig
    from icetail.monitor.service.config import ServiceConfig
    from icetail.monitor.service.scheduler import Service

    for key, value in warehouse.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(pyiceberg.catalog, "_ENV_CONFIG", Config())  # pyiceberg reads the env at import
    sink = tmp_path / "sink"
    config = ServiceConfig(
        pipelines=(PipelineConfig(CATALOG_NAME, TABLE, f"sqlite:///{tmp_path / 'state.db'}", f"parquet://{sink}"),),
        interval_seconds=0.5,
        metrics_host="127.0.0.1",
        metrics_port=0,
        max_failures=1000,
    )
    return Service(config, spark=spark), sink


@contextlib.contextmanager
def running(service: Any) -> Iterator[None]:
    runner = threading.Thread(target=service.run, kwargs={"install_signal_handlers": False}, daemon=True)
    runner.start()
    try:
        yield
    finally:
        service.stop()
        runner.join(EXIT_SECONDS)


@contextlib.contextmanager
def in_process_service(
    tmp_path: Path, warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, Path]]:
    """A Service on the test's SparkSession in a thread (no extra JVM), following ns.events."""
    service, sink = make_service(tmp_path, warehouse, spark, monkeypatch)
    with running(service):
        yield service, sink


def wait_in_process_caught_up(service: Any, table: Table) -> None:
    current = table.metadata.current_snapshot()
    assert current is not None

    def caught_up() -> bool:
        cursor = service.registry.get_sample_value("icetail_cursor_commit_timestamp_seconds", LABELS)
        return cursor is not None and abs(cursor - current.timestamp_ms / 1000) < 1e-6

    wait_until(caught_up, timeout=CATCH_UP_SECONDS, what=f"cursor at snapshot {current.snapshot_id}")


def test_lag_is_visible_while_a_batch_is_in_flight(
    tmp_path: Path, warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = warehouse.create_table("events", SCHEMA, {"write.parquet.row-group-limit": "1000"})
    table.append(rows(range(3)))
    hold = tmp_path / "hold"  # once it exists, the batch waits after its first chunk until the service stops
    monkeypatch.setenv(HOLD_AFTER_CHUNK_ENV, str(hold))
    with in_process_service(tmp_path, warehouse, spark, monkeypatch) as (service, sink):
        wait_in_process_caught_up(service, warehouse.load("events"))
        delivered = set(sink_files(sink))
        table = warehouse.load("events")
        hold.touch()
        table.append(rows(range(10_000, 40_000)))  # 30 chunks
        table.append(rows(range(200_000, 200_010)))

        def in_flight() -> bool:
            return any(b not in delivered for b in sink_files(sink))

        wait_until(in_flight, timeout=CATCH_UP_SECONDS, interval=0.01, what="first chunk of the new batch")
        lag = service.registry.get_sample_value("icetail_lag_snapshots", LABELS)
        assert lag is not None and lag >= 1, "two snapshots are committed and not yet delivered"


def test_discovered_snapshots_are_counted(
    tmp_path: Path, warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = warehouse.create_table("events", SCHEMA)
    table.append(rows(range(3)))
    table.append(rows(range(3, 5)))
    with in_process_service(tmp_path, warehouse, spark, monkeypatch) as (service, _):
        wait_in_process_caught_up(service, warehouse.load("events"))
        processed = service.registry.get_sample_value("icetail_snapshots_processed_total", LABELS)
        discovered = service.registry.get_sample_value("icetail_snapshots_discovered_total", LABELS)
    assert processed == 2
    assert discovered == 2


def test_readiness_and_lag_before_during_and_after_cycles(
    tmp_path: Path, warehouse: Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not ready and lag unknown (NaN, never 0) until the first cycle; ready at 0 after; not ready while failing."""
    import math

    table = warehouse.create_table("events", SCHEMA)
    table.append(rows(range(3)))
    service, _ = make_service(tmp_path, warehouse, spark, monkeypatch)

    def scrape(port: int | None) -> tuple[int, str, Samples]:
        ready, metrics = http_get(f"http://127.0.0.1:{port}/readyz"), http_get(f"http://127.0.0.1:{port}/metrics")
        assert ready is not None and metrics is not None and metrics[0] == 200
        return ready[0], ready[1], parse_samples(metrics[1])

    # before the first cycle: the endpoint is up, nothing has looked at the table yet
    _, port = service.server.start("127.0.0.1", 0)
    status, reason, samples = scrape(port)
    service.server.stop()
    assert (status, reason.strip()) == (503, f"{CONSUMER}: first cycle not finished")
    for name in ("icetail_lag_seconds", "icetail_lag_snapshots"):
        value = sample(samples, name, **LABELS)
        assert value is not None and math.isnan(value), f"{name} must be NaN before the first look, got {value}"
    assert sample(samples, "process_resident_memory_bytes") and sample(samples, "process_start_time_seconds")
    assert sample(samples, "process_open_fds") is not None and sample(samples, "process_cpu_seconds_total") is not None

    with running(service):

        def ready() -> Samples | None:
            if service.server.port is None:
                return None  # run() has not bound its port yet
            status, _, samples = scrape(service.server.port)
            return samples if status == 200 and sample(samples, "icetail_lag_snapshots", **LABELS) == 0 else None

        samples = wait_until(ready, timeout=CATCH_UP_SECONDS, what="ready, caught up")
        assert sample(samples, "icetail_lag_seconds", **LABELS) == 0

        warehouse.catalog.drop_table(TABLE)  # every cycle fails from now on

        def failing() -> tuple[str, Samples] | None:
            status, reason, samples = scrape(service.server.port)
            return (reason, samples) if status == 503 else None

        reason, samples = wait_until(failing, timeout=CATCH_UP_SECONDS, what="not ready while failing")
        assert reason.startswith(f"{CONSUMER}: ") and " consecutive failures: " in reason, reason
        assert f"table '{TABLE}' does not exist" in reason
        lag = sample(samples, "icetail_lag_snapshots", **LABELS)
        assert lag is not None and math.isnan(lag), "a failing consumer's lag is unknown, not the last value"


def test_sigterm_while_the_jvm_starts_stops_serve_at_once(
    tmp_path: Path, warehouse: Warehouse, children: list[Child]
) -> None:
    """A stop in serve's first seconds, its Spark JVM still starting (a rolling restart right after
    a deploy): the start is given up, not waited for (tens of seconds under load), the cycle
    waiting for it is not counted as a failure, and serve exits 0. The start is held by a test
    seam, so the stop provably lands before the JVM is up; without the fix serve never exits."""
    table = warehouse.create_table("events", SCHEMA)
    table.append(rows(range(5)))
    hold = tmp_path / "hold-session-start"
    hold.touch()
    serve = start_serve(tmp_path, warehouse, children, "starting", env=hold_env(HOLD_SESSION_START_ENV, hold))
    wait_until(
        lambda: Path(f"{hold}.held").exists() or None, timeout=STARTUP_SECONDS, what="the held start", child=serve
    )
    serve.signal(signal.SIGTERM)
    assert serve.wait(EXIT_SECONDS) == 0, serve.diagnostics()  # a bound against hanging, not a measurement
    assert hold.exists(), "the start was held until serve exited"
    log = serve.events()
    assert any(e.get("msg") == "stop requested" for e in log), serve.diagnostics()
    assert not [e for e in log if e.get("msg") == "cycle failed"], serve.diagnostics()
    assert not list((tmp_path / "sink").glob("*.parquet")), "nothing was read without a session"
