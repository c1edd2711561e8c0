"""icetail.monitor.service.metrics and monitor.http_server: a real server on port 0, real HTTP requests."""

from __future__ import annotations

import gzip
import math
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.table.snapshots import Snapshot

from icetail.kernel.model import ChangeType
from icetail.monitor.planning.lineage import age_seconds
from icetail.monitor.service.http_server import MonitorServer
from icetail.monitor.service.metrics import (
    BatchReport,
    FailureStage,
    Metrics,
    build_versions,
)

T, C = "db.events", "audit"
LABELS = {"table": T, "consumer": C}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics.create(
        registry,
        versions={
            "icetail": "9.9.9",
            "pyspark": "3.5.9",
            "pyiceberg": "0.12.0",
            "pyarrow": "26.0.1",
            "python": "3.11.7",
        },
    )


class Ready:
    def __init__(self) -> None:
        self.state: tuple[bool, str] = (False, "starting: no poll yet")

    def __call__(self) -> tuple[bool, str]:
        return self.state


@pytest.fixture
def ready() -> Ready:
    return Ready()


@pytest.fixture
def server(registry: CollectorRegistry, ready: Ready) -> Iterator[tuple[MonitorServer, int]]:
    srv = MonitorServer(registry, ready)
    _, port = srv.start("127.0.0.1", 0)
    try:
        yield srv, port
    finally:
        srv.stop()


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers.items()), err.read()


def report(**overrides: object) -> BatchReport:
    fields: dict[str, object] = {
        "table": T,
        "consumer": C,
        "from_snapshot_exclusive": 100,
        "to_snapshot_inclusive": 103,
        "snapshots": 3,
        "rows_by_change_type": {ChangeType.INSERT: 10, "DELETE": 4, "UPDATE_BEFORE": 2, "UPDATE_AFTER": 2},
        "data_files": 5,
        "bytes_read": 123_456,
        "row_groups": 7,
        "delete_files": 2,
        "deleted_rows": 6,
        "splits": 8,
        "chunks": 2,
        "planning_seconds": 0.3,
        "batch_seconds": 4.0,
    }
    fields.update(overrides)
    return BatchReport(**fields)  # type: ignore[arg-type]


# --- metrics -------------------------------------------------------------------------------


def test_create_uses_a_fresh_registry_not_the_global_one() -> None:
    from prometheus_client import REGISTRY

    before = set(REGISTRY._names_to_collectors)
    a, b = Metrics.create(), Metrics.create()
    assert a.registry is not b.registry
    assert set(REGISTRY._names_to_collectors) == before
    with pytest.raises(ValueError):
        Metrics.create(a.registry)  # duplicated timeseries on the same registry


def test_record_batch_counts_everything(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.record_batch(report(), now=1_700_000_000.0)
    metrics.record_batch(report(rows_by_change_type={"INSERT": 1}, batch_seconds=0.2), now=1_700_000_060.0)
    v = registry.get_sample_value
    assert v("icetail_snapshots_processed_total", LABELS) == 6
    assert v("icetail_rows_emitted_total", {**LABELS, "change_type": "INSERT"}) == 11
    assert v("icetail_rows_emitted_total", {**LABELS, "change_type": "DELETE"}) == 4
    assert v("icetail_rows_emitted_total", {**LABELS, "change_type": "UPDATE_AFTER"}) == 2
    assert v("icetail_data_files_read_total", LABELS) == 10
    assert v("icetail_bytes_read_total", LABELS) == 246_912
    assert v("icetail_row_groups_read_total", LABELS) == 14
    assert v("icetail_delete_files_applied_total", LABELS) == 4
    assert v("icetail_deleted_rows_applied_total", LABELS) == 12
    assert v("icetail_splits_committed_total", LABELS) == 16
    assert v("icetail_chunks_committed_total", LABELS) == 4
    assert v("icetail_batch_duration_seconds_count", LABELS) == 2
    assert v("icetail_batch_duration_seconds_sum", LABELS) == pytest.approx(4.2)
    assert v("icetail_batch_duration_seconds_bucket", {**LABELS, "le": "0.25"}) == 1
    assert v("icetail_batch_duration_seconds_bucket", {**LABELS, "le": "+Inf"}) == 2
    assert v("icetail_planning_duration_seconds_count", LABELS) == 2
    assert v("icetail_planning_duration_seconds_sum", LABELS) == pytest.approx(0.6)
    assert v("icetail_last_success_timestamp_seconds", LABELS) == 1_700_000_060.0
    assert v("icetail_consecutive_failures", LABELS) == 0


def test_failures_count_by_stage_and_reset_on_success(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.record_failure(T, C, FailureStage.SINK)
    metrics.record_failure(T, C, "sink")
    metrics.record_failure(T, C, "catalog")
    v = registry.get_sample_value
    assert v("icetail_failures_total", {**LABELS, "stage": "sink"}) == 2
    assert v("icetail_failures_total", {**LABELS, "stage": "catalog"}) == 1
    assert v("icetail_consecutive_failures", LABELS) == 3
    metrics.record_success(T, C, now=42.0)  # an empty poll is a success too
    assert v("icetail_consecutive_failures", LABELS) == 0
    assert v("icetail_last_success_timestamp_seconds", LABELS) == 42.0
    assert v("icetail_failures_total", {**LABELS, "stage": "sink"}) == 2  # counters never go back
    with pytest.raises(ValueError, match="unknown failure stage"):
        metrics.record_failure(T, C, "network")


def test_register_consumer_creates_zero_series_and_unknown_lag(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.register_consumer(T, C)
    v = registry.get_sample_value
    for change_type in ChangeType:
        assert v("icetail_rows_emitted_total", {**LABELS, "change_type": change_type.value}) == 0
    for stage in FailureStage:
        assert v("icetail_failures_total", {**LABELS, "stage": stage.value}) == 0
    for lag in ("icetail_lag_seconds", "icetail_lag_snapshots"):  # unknown until measured, never a false 0
        value = v(lag, LABELS)
        assert value is not None and math.isnan(value), lag
    metrics.set_lag(T, C, snapshots=0, seconds=0.0)
    assert v("icetail_lag_seconds", LABELS) == 0
    metrics.set_lag_unknown(T, C)
    assert math.isnan(v("icetail_lag_snapshots", LABELS) or 0.0)
    assert v("icetail_consecutive_failures", LABELS) == 0
    assert v("icetail_batch_duration_seconds_count", LABELS) == 0
    assert v("icetail_last_success_timestamp_seconds", LABELS) is None  # only a real success sets it


def _snapshot(*, timestamp_ms: int) -> Snapshot:
    return Snapshot(snapshot_id=1, timestamp_ms=timestamp_ms, manifest_list="unused")


def test_lag_and_gauges(metrics: Metrics, registry: CollectorRegistry) -> None:
    metrics.set_lag(
        T,
        C,
        snapshots=4,
        seconds=age_seconds([_snapshot(timestamp_ms=1_000_000)], now_seconds=1_090.5),
        cursor_commit_timestamp_seconds=990.0,
    )
    metrics.record_discovered(T, C, 4)
    metrics.set_inflight_chunks(T, C, 2)
    v = registry.get_sample_value
    assert v("icetail_lag_snapshots", LABELS) == 4
    assert v("icetail_lag_seconds", LABELS) == pytest.approx(90.5)
    assert v("icetail_cursor_commit_timestamp_seconds", LABELS) == 990.0
    assert v("icetail_snapshots_discovered_total", LABELS) == 4
    assert v("icetail_inflight_chunks", LABELS) == 2
    metrics.set_lag(T, C, snapshots=0, seconds=age_seconds([], now_seconds=1_090.5))
    assert v("icetail_lag_seconds", LABELS) == 0
    assert v("icetail_cursor_commit_timestamp_seconds", LABELS) == 990.0  # unchanged when not given
    # clock skew never goes negative
    assert age_seconds([_snapshot(timestamp_ms=2_000_000)], now_seconds=1_000.0) == 0.0
    with pytest.raises(ValueError):
        metrics.set_lag(T, C, snapshots=-1, seconds=0)


def test_build_info(metrics: Metrics, registry: CollectorRegistry) -> None:
    assert (
        registry.get_sample_value(
            "icetail_build_info",
            {"icetail": "9.9.9", "pyspark": "3.5.9", "pyiceberg": "0.12.0", "pyarrow": "26.0.1", "python": "3.11.7"},
        )
        == 1
    )
    versions = build_versions()
    assert set(versions) == {"icetail", "pyspark", "pyiceberg", "pyarrow", "python"}
    assert all(versions.values())


def test_batch_report_is_frozen_and_validated() -> None:
    r = report()
    assert r.rows_by_change_type == {"INSERT": 10, "DELETE": 4, "UPDATE_BEFORE": 2, "UPDATE_AFTER": 2}
    assert r.rows == 18
    with pytest.raises(AttributeError):
        r.snapshots = 9  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown change type"):
        report(rows_by_change_type={"UPSERT": 1})
    with pytest.raises(ValueError, match="bytes_read"):
        report(bytes_read=-1)
    with pytest.raises(ValueError):
        report(batch_seconds=-0.1)


# --- HTTP ----------------------------------------------------------------------------------


def test_metrics_endpoint_serves_the_registry(
    metrics: Metrics, registry: CollectorRegistry, server: tuple[MonitorServer, int]
) -> None:
    _, port = server
    metrics.record_batch(report(), now=1_700_000_000.0)
    status, headers, body = get(port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    # the text parser strips _total from counter family names
    assert {
        "icetail_rows_emitted",
        "icetail_batch_duration_seconds",
        "icetail_build_info",
        "icetail_lag_seconds",
    } <= set(families)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    key = ("icetail_rows_emitted_total", tuple(sorted({**LABELS, "change_type": "INSERT"}.items())))
    assert (
        samples[key]
        == 10
        == registry.get_sample_value("icetail_rows_emitted_total", {**LABELS, "change_type": "INSERT"})
    )
    assert samples[("icetail_last_success_timestamp_seconds", tuple(sorted(LABELS.items())))] == 1_700_000_000.0


def test_metrics_endpoint_openmetrics_gzip_and_name_filter(metrics: Metrics, server: tuple[MonitorServer, int]) -> None:
    _, port = server
    metrics.record_failure(T, C, "read")
    status, headers, body = get(
        port, "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    assert 'icetail_failures_total{consumer="audit",stage="read",table="db.events"} 1.0' in text
    status, _, body = get(port, "/metrics?name[]=icetail_consecutive_failures")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert names == {"icetail_consecutive_failures"}


@pytest.mark.parametrize(
    ("accept", "query"),
    [
        ("", ""),
        ("application/openmetrics-text; version=1.0.0", ""),
        (
            "",
            "?name[]=icetail_failures_total&name[]=icetail_failures_created&name[]=icetail_batch_duration_seconds_count",
        ),
    ],
)
def test_counters_and_histograms_export_no_created_series(
    metrics: Metrics, registry: CollectorRegistry, server: tuple[MonitorServer, int], accept: str, query: str
) -> None:
    """client_python's `_created` samples are left out of the endpoint, and only there (issue 33)."""
    _, port = server
    metrics.register_consumer(T, C)
    metrics.record_failure(T, C, "read")
    status, _, body = get(port, f"/metrics{query}", {"Accept": accept} if accept else None)
    assert status == 200
    text = body.decode()
    assert 'icetail_failures_total{consumer="audit",stage="read",table="db.events"} 1.0' in text
    assert "icetail_batch_duration_seconds_count" in text
    assert "_created" not in text, [line for line in text.splitlines() if "_created" in line][:3]
    # the registry itself, and client_python's process-wide setting, are left as they were
    assert registry.get_sample_value("icetail_failures_created", {**LABELS, "stage": "read"}) is not None


def test_healthz_and_readyz(ready: Ready, server: tuple[MonitorServer, int]) -> None:
    _, port = server
    assert get(port, "/healthz")[::2] == (200, b"ok\n")
    assert get(port, "/readyz")[::2] == (503, b"starting: no poll yet\n")
    ready.state = (True, "caught up at snapshot 103")
    assert get(port, "/readyz")[::2] == (200, b"caught up at snapshot 103\n")
    assert get(port, "/nope")[0] == 404


def test_readiness_that_raises_is_not_ready(registry: CollectorRegistry) -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("state store unreachable")

    with MonitorServer(registry, broken) as srv:
        _, port = srv.start("127.0.0.1", 0)
        status, _, body = get(port, "/readyz")
        assert status == 503
        assert b"state store unreachable" in body
        assert get(port, "/healthz")[0] == 200


def test_head_and_concurrent_requests(metrics: Metrics, server: tuple[MonitorServer, int]) -> None:
    _, port = server
    req = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200 and resp.read() == b""
    results: list[int] = []

    def scrape() -> None:
        results.append(get(port, "/metrics")[0])

    threads = [threading.Thread(target=scrape) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [200] * 16


def test_start_stop_port_zero_and_restart(registry: CollectorRegistry) -> None:
    srv = MonitorServer(registry)
    server, port = srv.start("127.0.0.1", 0)
    assert port > 0 and server.server_address[1] == port == srv.port
    with pytest.raises(RuntimeError):
        srv.start("127.0.0.1", 0)
    assert get(port, "/readyz")[0] == 200  # no readiness callable: ready
    srv.stop()
    srv.stop()  # idempotent
    assert srv.port is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
    # the same port can be bound again (SO_REUSEADDR)
    again = MonitorServer(registry)
    _, port2 = again.start("127.0.0.1", port)
    try:
        assert port2 == port and get(port, "/healthz")[0] == 200
    finally:
        again.stop()


def test_port_in_use_raises(registry: CollectorRegistry, server: tuple[MonitorServer, int]) -> None:
    _, port = server
    with pytest.raises(OSError):
        MonitorServer(registry).start("127.0.0.1", port)


def test_cursor_condition_and_collapsed_batches(metrics: Metrics, registry: CollectorRegistry) -> None:
    """An operator tells expiry from rollback by the `condition` label; repair batches are counted."""
    metrics.register_consumer(T, C)
    v = registry.get_sample_value
    conditions = ("cursor_expired", "chain_expired", "not_descendant")
    assert [v("icetail_cursor_lost", {**LABELS, "condition": c}) for c in conditions] == [0, 0, 0]
    assert v("icetail_collapsed_batches_total", LABELS) == 0
    metrics.set_cursor_condition(T, C, "chain_expired")
    assert [v("icetail_cursor_lost", {**LABELS, "condition": c}) for c in conditions] == [0, 1, 0]
    metrics.set_cursor_condition(T, C, "not_descendant")
    assert [v("icetail_cursor_lost", {**LABELS, "condition": c}) for c in conditions] == [0, 0, 1]
    with pytest.raises(ValueError, match="unknown cursor condition"):
        metrics.set_cursor_condition(T, C, "rollback")
    metrics.record_batch(report(collapsed=True))
    metrics.record_batch(report())
    assert v("icetail_collapsed_batches_total", LABELS) == 1
    metrics.set_cursor_condition(T, C, None)
    assert [v("icetail_cursor_lost", {**LABELS, "condition": c}) for c in conditions] == [0, 0, 0]


def test_replica_series_exist_with_one_replica_and_handovers_count_by_cause(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    """A lone serve exports the replica series too (the dashboard and IcetailConsumerUnowned read them):
    one replica alive, the consumer not owned until held, every cause at zero."""
    metrics.register_consumer(T, C)
    v = registry.get_sample_value
    assert v("icetail_replicas_alive") == 1
    assert v("icetail_consumer_owned", LABELS) == 0
    causes = ("joined", "left", "expired", "stopped")
    assert [v("icetail_handovers_total", {**LABELS, "cause": c}) for c in causes] == [0, 0, 0, 0]
    metrics.record_handover(T, C, "expired")
    metrics.record_handover(T, C, "left")
    metrics.record_handover(T, C, "left")
    assert [v("icetail_handovers_total", {**LABELS, "cause": c}) for c in causes] == [0, 2, 1, 0]
    with pytest.raises(ValueError, match="unknown hand-over cause"):
        metrics.record_handover(T, C, "moved")
