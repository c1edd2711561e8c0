"""A run cut off from its PostgreSQL store mid-batch (issue 35 s1): a real `icetail run` process whose
store connection goes through a proxy the test cuts (tests/support/partition_proxy.py), a real table,
a parquet sink.

The run is held after a committed chunk (tests/support/holds.py), the proxy is cut, and its lease
is left to expire on the database clock; then the hold is released. The run may not write its next
chunk: its lease deadline (monitor/engine/lease_clock.py) has passed, and the renewal it tries
first hangs in the partition. The proxy shows the moment the run reached for the store (after the
point where it used to write the chunk), and the sink is unchanged then. A second run takes the
consumer over and finishes the batch; when the partition heals, the cut run's late renewal is
refused by the store, it exits with one line, and the sink and the store are as the second run
left them: every row delivered exactly once, one batch in the history.
"""

from __future__ import annotations

import subprocess
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest

from icetail.state.store import open_store
from tests.support.catalogs import new_catalog
from tests.support.crash import kill_group
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, hold_env
from tests.support.partition_proxy import PartitionProxy
from tests.support.processes import child_env, icetail_command, icetail_lines, run_icetail
from tests.support.sinks import read_parquet_sink
from tests.support.stores import PG_URL
from tests.support.tables import BASE_SCHEMA, make_rows

pytestmark = pytest.mark.once  # long: two runs, a JVM each

CATALOG = "partcat"
TABLE = "ns.cut"
CONSUMER = "cut"
ROWS = 30
TTL = "6s"
START_S = 240.0  # a JVM starting on a busy 2-core machine
# A bound the product promises: the lease expires on the store's clock a TTL (6 s) after the last
# renewal that reached it, whatever the cut run does; the rest is this test's polls under load.
EXPIRY_S = 60.0
RUN_S = 300.0
# Guards against a hang only, for what the product promises no time for: when the released run
# next reaches for the store, and when it exits once healed (issue 47: wait on the event).
HANG_S = 600.0


def through(proxy: PartitionProxy, url: str) -> str:
    """`url` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    where = f"127.0.0.1:{proxy.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{netloc[0]}@{where}" if len(netloc) == 2 else where))


def sink_files(sink: Path) -> dict[str, tuple[int, int]]:
    """Every file under the sink (its staging folder too), by path: (inode, mtime): a rewrite changes them."""
    if not sink.exists():
        return {}
    return {str(p.relative_to(sink)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in sink.rglob("*") if p.is_file()}


def wait_for(what: str, timeout: float, probe: object, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not probe():  # type: ignore[operator]
        assert proc is None or proc.poll() is None, f"the cut run exited while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def lease_expired(state: str) -> bool:
    with open_store(state, create=False) as store:
        checkpoint = store.load(CONSUMER)
    assert checkpoint is not None and checkpoint.inflight is not None, checkpoint
    return not checkpoint.lease_is_live()


def test_a_run_cut_off_from_the_store_mid_batch_writes_nothing_past_its_lease_and_is_refused_late(
    tmp_path: Path, pg_state: str
) -> None:
    cat = new_catalog(tmp_path / "catalog", CATALOG)
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, schema=BASE_SCHEMA)
    table.append(make_rows(BASE_SCHEMA, range(ROWS)))
    env = child_env([cat], tmp_path / "spark")
    sink = tmp_path / "sink"
    args = ["run", "--catalog", CATALOG, "--table", TABLE, "--sink", f"parquet://{sink}", "--consumer", CONSUMER,
            "--chunk-rows", "3", "--lease-ttl", TTL]  # fmt: skip
    hold = tmp_path / "hold"
    hold.touch()
    log = tmp_path / "cut.log"
    with PartitionProxy(*_host_port(PG_URL)) as proxy, open(log, "wb") as out:
        cut = subprocess.Popen(
            [*icetail_command(), *args, "--state", through(proxy, pg_state)],
            env={**env, **hold_env(HOLD_AFTER_CHUNK_ENV, hold)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for("the first chunk committed", START_S, Path(f"{hold}.held").exists, cut)
            with open_store(pg_state, create=False) as store:
                held = store.load(CONSUMER)
            assert held is not None and held.lease is not None and f":{cut.pid}:" in held.lease.owner
            committed = [p.next_row_exclusive for p in held.inflight.progress] if held.inflight else []
            assert committed and 0 < sum(n or 0 for n in committed) < ROWS, held  # mid-batch

            proxy.cut()
            # past the lease's expiry on the database clock, so past the run's own deadline
            wait_for("the cut run's lease to expire", EXPIRY_S, lambda: lease_expired(pg_state), cut)
            before = sink_files(sink)
            assert before, "the first chunk is in the sink"
            sent = proxy.held_bytes
            hold.unlink()
            # the run reaches for the store: past where it wrote its next chunk before it had a deadline
            proxy.wait_for_held_bytes(sent, timeout=HANG_S)
            assert cut.poll() is None, log.read_text(errors="replace")
            assert sink_files(sink) == before, "the cut run wrote to the sink after its lease deadline"

            # another run takes the consumer over and finishes the batch, exactly once
            other = run_icetail([*args, "--state", pg_state], env, timeout=RUN_S)
            assert other.returncode == 0, other.stderr
            after_takeover = sink_files(sink)

            proxy.heal()  # the cut run's renewal reaches the store, late
            try:
                cut.wait(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the cut run did not end once healed\n{log.read_text(errors='replace')}")
        finally:
            hold.unlink(missing_ok=True)
            kill_group(cut)
    output = log.read_text(errors="replace")
    lines = icetail_lines(output)
    assert cut.returncode == 1, output  # transient: refused by the store
    assert len(lines) == 1 and "holds no lease" in lines[0], output  # the taker-over released it on exit
    assert sink_files(sink) == after_takeover, "the cut run wrote to the sink after it was healed"

    delivered = read_parquet_sink(sink)
    assert delivered is not None
    assert sorted(Counter(delivered.column("id").to_pylist()).items()) == [(i, 1) for i in range(ROWS)]
    with open_store(pg_state, create=False) as store:
        checkpoint = store.load(CONSUMER)
        history = store.history(CONSUMER)
    current = catalog.load_table(TABLE).metadata.current_snapshot_id
    assert checkpoint is not None and checkpoint.inflight is None and checkpoint.lease is None, checkpoint
    assert checkpoint.cursor.snapshot_id == current
    assert [(h.from_snapshot_exclusive, h.to_snapshot_inclusive) for h in history] == [(None, current)]


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432
