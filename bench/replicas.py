"""Replicas of one `icetail serve` configuration: balance, take-over after a death, lag through a
rolling restart, memory per replica (issue 35 s3).

    PYTHONPATH=. .venv-spark4/bin/python -m bench.replicas [--tables 30] [--replicas 3] [--ttl 10]
        [--interval 2] [--local-max-bytes 0]

The replicas choose each batch's engine as users' do (these one-row batches read in process, no JVM);
`--local-max-bytes 0` puts every batch on Spark, as the rounds before issue 45 measured.

Builds `--tables` pyiceberg tables (a SQL catalog on SQLite in a temp dir) and starts `--replicas`
`icetail serve` processes with one configuration (every table in `tables:`, parquet sinks, the
PostgreSQL checkpoint store of the test suite (127.0.0.1:5432/test) in a fresh schema, dropped at the
end, `--lease-ttl`, `--interval`). Then, every figure
printed as it is measured:

* balance: once every consumer is held and caught up, the most and the fewest consumers a replica
  holds (read from the store's leases), and their ratio (goal <= 1.5 with >= 10 per replica);
* memory: the RSS of each replica's process tree (Python driver + JVM + Python workers, /proc),
  idle and caught up;
* death: the replica holding the most consumers is SIGKILLed, one row is appended to every table,
  and the seconds from the kill until each of its tables' cursors reaches its new snapshot under
  another replica (goal: lease TTL + one interval + one batch): the last of them, and the median;
* rolling restart: for every replica in turn a new one is started and waited for until its
  /readyz answers 200, then the old one gets SIGTERM and is waited for (deploy/k8s's RollingUpdate:
  maxSurge 1, maxUnavailable 0), while one row is appended to every table each interval;
  each table's lag (now minus the commit time of its oldest undelivered snapshot,
  sampled every 0.25 s from the store and the catalog) and its longest value over the whole
  restart (goal: one interval + one hand-over).

The figures go to bench/RESULTS.md with this command, the pyspark line and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from bench.procs import _children, _rss_and_kind
from icetail.kernel.settings import DEFAULT_LOCAL_MAX_BYTES, LOCAL_MAX_BYTES_ENV
from icetail.state.store import open_store
from tests.support.processes import child_env
from tests.support.serve import CATALOG_NAME, ID_NAME, NAMESPACE, Serve, Warehouse, free_port, id_name_rows
from tests.support.stores import drop_state, new_state_url

T = TypeVar("T")


def tree_rss_mib(root: int) -> float:
    """RSS of a process and its live descendants, MiB."""
    total = _rss_and_kind(root)[0]
    for pid in _children(root):
        total += _rss_and_kind(pid)[0]
    return total / 2**20


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.warehouse = Warehouse(root / "iceberg")
        self.tables = [f"t{i:03d}" for i in range(args.tables)]
        self.consumers = {t: f"{CATALOG_NAME}.{NAMESPACE}.{t}" for t in self.tables}
        self.state = new_state_url("postgresql", root)
        self.next_id = 0
        for table in self.tables:
            self.warehouse.create_table(table, ID_NAME)
        self.config = root / "icetail.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "catalog": CATALOG_NAME,
                    "state": self.state,
                    "sink": f"parquet://{root / 'sink'}",
                    "interval": f"{args.interval}s",
                    "lease_ttl": f"{args.ttl}s",
                    "metrics_host": "127.0.0.1",
                    "tables": [{"table": f"{NAMESPACE}.{t}"} for t in self.tables],
                }
            )
        )
        self.replicas: list[Serve] = []

    def start(self, name: str) -> Serve:
        port = free_port()
        serve = Serve(
            ["--config", str(self.config), "--metrics-port", str(port)],
            env=child_env(extra={**self.warehouse.env(), LOCAL_MAX_BYTES_ENV: str(self.args.local_max_bytes)}),
            cwd=self.root,
            name=name,
            port=port,
        )
        self.replicas.append(serve)
        return serve

    def append_all(self) -> None:
        for table in self.tables:
            ids = range(self.next_id, self.next_id + 1)
            self.next_id += 1
            self.warehouse.load(table).append(id_name_rows(ids))

    def heads(self) -> dict[str, tuple[int | None, list[tuple[int, int]]]]:
        """Each table's snapshots, (id, commit ms) oldest first, by table."""
        out = {}
        for table in self.tables:
            metadata = self.warehouse.load(table).metadata
            out[table] = (metadata.current_snapshot_id, [(s.snapshot_id, s.timestamp_ms) for s in metadata.snapshots])
        return out

    def leases(self) -> dict[str, tuple[int | None, str | None]]:
        """Each table's cursor snapshot and lease owner's pid, from the store."""
        out: dict[str, tuple[int | None, str | None]] = {}
        with open_store(self.state) as store:
            for table, consumer in self.consumers.items():
                checkpoint = store.load(consumer)
                if checkpoint is None:
                    out[table] = (None, None)
                    continue
                lease = checkpoint.lease
                live = lease is not None and lease.expires_at_ms > checkpoint.as_of_ms
                owner = lease.owner.split(":")[1] if live and lease is not None else None
                out[table] = (checkpoint.cursor.snapshot_id, owner)  # the last snapshot delivered whole
        return out

    def caught_up(self) -> dict[str, list[str]] | None:
        """Consumers by holder pid when every table is caught up and held, else None."""
        heads, leases = self.heads(), self.leases()
        held: dict[str, list[str]] = {}
        for table in self.tables:
            done, owner = leases[table]
            if owner is None or done != heads[table][0]:
                return None
            held.setdefault(owner, []).append(table)
        return held


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.25)
    raise SystemExit(f"timed out after {timeout}s waiting for {what}")


def lag_seconds(bench: Bench) -> dict[str, float]:
    """Each table's lag now: now minus the commit time of its oldest snapshot not yet delivered."""
    # the cursors first: a snapshot delivered between the two reads is then among the heads (read the
    # other way round, a cursor newer than the heads read counted every snapshot as pending)
    leases = bench.leases()
    heads = bench.heads()
    now_ms = time.time() * 1000
    out = {}
    for table in bench.tables:
        done = leases[table][0]
        snapshots = heads[table][1]
        ids = [s for s, _ in snapshots]
        pending = snapshots[ids.index(done) + 1 :] if done in ids else snapshots
        out[table] = (now_ms - pending[0][1]) / 1000 if pending else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=10.0, help="the lease TTL, seconds")
    parser.add_argument("--interval", type=float, default=2.0, help="serve's poll interval, seconds")
    parser.add_argument(
        "--local-max-bytes",
        type=int,
        default=DEFAULT_LOCAL_MAX_BYTES,
        help="the replicas' ICETAIL_LOCAL_MAX_BYTES: the default reads these small batches in process, 0 on Spark",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="icetail-replicas-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            run(bench)
        finally:
            for serve in bench.replicas:
                serve.kill_group()
            drop_state(bench.state)


def run(bench: Bench) -> None:
    args = bench.args
    engine = "on Spark" if args.local_max_bytes == 0 else f"in process up to {args.local_max_bytes} bytes a batch"
    print(f"{args.tables} tables, {args.replicas} replicas, lease TTL {args.ttl}s, interval {args.interval}s, {engine}")
    print(f"load at start: {os.getloadavg()}")
    bench.append_all()
    started = time.monotonic()
    for i in range(args.replicas):
        bench.start(f"r{i}")
    held = wait_for(bench.caught_up, 600, "every table held and caught up")
    print(f"first delivery of every table: {time.monotonic() - started:.1f}s after the replicas started")
    time.sleep(3 * args.interval)  # a few rosters: claims settle at the fair share
    held = wait_for(bench.caught_up, 120, "caught up again")
    counts = sorted(len(v) for v in held.values())
    print(f"balance: consumers per replica {counts}, most / fewest {counts[-1] / counts[0]:.2f}")
    for serve in bench.replicas:
        print(f"memory idle: {serve.name} {tree_rss_mib(serve.pid):.0f} MiB")

    # death: the replica holding the most consumers
    victim = max((s for s in bench.replicas if s.alive()), key=lambda s: len(held.get(str(s.pid), [])))
    orphans = held[str(victim.pid)]
    os.killpg(victim.pid, signal.SIGKILL)  # the whole pod: driver, JVM and workers
    killed = time.monotonic()
    bench.append_all()
    heads = bench.heads()
    back: dict[str, float] = {}
    while len(back) < len(orphans) and time.monotonic() - killed < 600:
        leases = bench.leases()
        for table in orphans:
            done, owner = leases[table]
            if table not in back and owner not in (None, str(victim.pid)) and done == heads[table][0]:
                back[table] = time.monotonic() - killed
        time.sleep(0.25)
    victim.kill_group()
    bench.replicas.remove(victim)
    values = sorted(back.values())
    print(
        f"death: {len(orphans)} tables of {victim.name} delivering again elsewhere after "
        f"median {statistics.median(values):.1f}s, last {values[-1]:.1f}s "
        f"(goal: TTL {args.ttl}s + interval {args.interval}s + one batch); {len(values)}/{len(orphans)} back"
    )
    replacement = bench.start(f"{victim.name}b")
    wait_for(bench.caught_up, 600, "the replacement started and every table caught up")

    # rolling restart under appends
    stop = threading.Event()
    worst: dict[str, float] = dict.fromkeys(bench.tables, 0.0)

    def writer() -> None:
        while not stop.wait(args.interval):
            bench.append_all()

    def sampler() -> None:
        while not stop.wait(0.25):
            for table, lag in lag_seconds(bench).items():
                worst[table] = max(worst[table], lag)

    threads = [threading.Thread(target=writer, daemon=True), threading.Thread(target=sampler, daemon=True)]
    for thread in threads:
        thread.start()
    rolled = time.monotonic()
    for serve in list(bench.replicas):
        fresh = bench.start(f"{serve.name}+")  # maxSurge 1: the new pod first
        fresh.wait_status("/readyz", 200, 600)  # a RollingUpdate waits for the new pod's readiness
        serve.signal(signal.SIGTERM)  # maxUnavailable 0: then one old pod stops
        code = serve.wait(120)
        bench.replicas.remove(serve)
        print(f"rolled {serve.name} (exit {code}) at {time.monotonic() - rolled:.0f}s")
    wait_for(bench.caught_up, 600, "every table caught up after the rolling restart")
    stop.set()
    for thread in threads:
        thread.join(5)
    lags = sorted(worst.values())
    print(
        f"rolling restart ({time.monotonic() - rolled:.0f}s): longest lag of any table {lags[-1]:.1f}s, "
        f"median table's longest {statistics.median(lags):.1f}s (goal: interval {args.interval}s + one hand-over)"
    )
    held = wait_for(bench.caught_up, 120, "caught up at the end")
    counts = sorted(len(v) for v in held.values())
    print(f"balance at the end: {counts}")
    for serve in bench.replicas:
        print(f"memory after the rolling restart: {serve.name} {tree_rss_mib(serve.pid):.0f} MiB")
    del replacement
    print(f"load at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
