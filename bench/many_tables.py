"""Many tables in one `icetail serve`: memory of the process tree, and each table's lag while others are busy.

    .venv/bin/python -m bench.many_tables [--tables N] [--rounds N] [--big-rows N] [--big-append-rows N]
        [--concurrent-tables N] [--scheduler-mode fair|fifo]

Builds N small pyiceberg tables (100 rows each) and one BIG table (`--big-rows` in 4 files) in a SQL
catalog on SQLite in a temp dir, starts `icetail serve` as a child (`python -m icetail serve --config
FILE`: every table in the `tables:` list, interval 1s, parquet sinks and SQLite state in the temp dir,
the Spark session `serve` makes: FAIR scheduling, a pool per consumer) and waits until every
consumer's `icetail_lag_snapshots` is 0. Then:

* solo rounds: one small append to one small table, nothing else busy: seconds from the snapshot's
  commit time until /metrics shows its cursor at that snapshot (that table's interval + read time);
* load rounds: one big append (`--big-append-rows`, one snapshot) to the big table, then one small
  append to every small table at once; /metrics is polled every 0.2 s and each table's catch-up
  seconds (from its own snapshot's commit time) are recorded: every small table's, their median and
  max, and the big table's;
* the RSS of the serve process tree (Python driver + JVM + Python workers; /proc every 0.5 s):
  its max while idle (N tables followed, nothing new) and while working (the load rounds).

Catch-up seconds include up to 0.2 s of polling. `--concurrent-tables` and `--scheduler-mode` are
serve's `concurrent_tables` and `spark_scheduler_mode` keys (default: one scheduler thread per
table, FAIR); `--concurrent-tables 10` is serve before R33 (APScheduler's default pool). Every round
is printed. The figures go to bench/RESULTS.md with this command.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.sql import SqlCatalog

from bench.procs import _children, _rss_and_kind

CATALOG = "many"  # lower-case letters only: pyiceberg's env catalog naming
SMALL = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
BIG = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("amount", pa.float64())])
WANTED = (
    "icetail_lag_snapshots",
    "icetail_cursor_commit_timestamp_seconds",
    "icetail_batch_duration_seconds_sum",
    "icetail_batch_duration_seconds_count",
)
Samples = dict[tuple[str, str], float]  # (metric, consumer) -> value


def small_rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SMALL)


def big_rows(start: int, count: int) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table(
        {
            "id": np.arange(start, start + count, dtype=np.int64),
            "k": rng.integers(0, 1000, count, dtype=np.int32),
            "amount": rng.random(count),
        },
        schema=BIG,
    )


def build(root: Path, tables: int, big: int) -> SqlCatalog:
    (root / "warehouse").mkdir(parents=True)
    catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    for i in range(tables):
        catalog.create_table(f"ns.t{i:02d}", schema=SMALL).append(small_rows(0, 100))
    table = catalog.create_table("ns.big", schema=BIG, properties={"write.target-file-size-bytes": str(1 << 40)})
    with table.transaction() as tx:  # 4 files, one per append
        for f in range(4):
            tx.append(big_rows(f * (big // 4), big // 4))
    return catalog


def scrape(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in WANTED:
                out[(s.name, s.labels["consumer"])] = float(s.value)
    return out


class TreeRss:
    """Max RSS of a process tree (root + descendants), summed per kind, sampled every 0.5 s, per phase."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.phase = "startup"
        self.peaks: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = {"driver_python": _rss_and_kind(self.root)[0], "jvm": 0, "python_workers": 0}
            for pid in _children(self.root):
                rss, kind = _rss_and_kind(pid)
                if kind != "gone":
                    now["jvm" if kind == "jvm" else "python_workers"] += rss
            now["total"] = sum(now.values())
            peak = self.peaks.setdefault(self.phase, dict.fromkeys(now, 0))
            for key, value in now.items():
                peak[key] = max(peak[key], value)
            time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def wait_for(probe: Callable[[], bool], timeout: float, what: str, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if child.poll() is not None:
            raise RuntimeError(f"serve exited ({child.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def catch_up(port: int, targets: dict[str, float], child: subprocess.Popen[bytes], timeout: float = 300) -> dict:
    """Seconds from each consumer's target commit time (Unix s) until its cursor is there and its lag 0."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(targets):
        if child.poll() is not None:
            raise RuntimeError(f"serve exited ({child.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out; still behind: {sorted(set(targets) - set(done))}")
        samples = scrape(port) or {}
        now = time.time()
        for consumer, ts in targets.items():
            cursor = samples.get(("icetail_cursor_commit_timestamp_seconds", consumer), 0.0)
            if consumer not in done and cursor >= ts - 1e-3 and samples.get(("icetail_lag_snapshots", consumer)) == 0:
                done[consumer] = now - ts
        time.sleep(0.2)
    return done


def scrape_surely(port: int, tries: int = 20) -> Samples:
    """A scrape that a busy machine's slow answer does not lose (retried for up to ~2 min)."""
    for _ in range(tries):
        samples = scrape(port)
        if samples is not None:
            return samples
        time.sleep(1)
    raise RuntimeError(f"/metrics on port {port} did not answer {tries} times")


def batch_seconds(before: Samples, after: Samples, consumer: str) -> float:
    """Mean wall time of the batches `consumer` delivered between two scrapes (its own read time)."""
    count = after[("icetail_batch_duration_seconds_count", consumer)]
    count -= before[("icetail_batch_duration_seconds_count", consumer)]
    total = after[("icetail_batch_duration_seconds_sum", consumer)]
    total -= before[("icetail_batch_duration_seconds_sum", consumer)]
    return total / count if count else float("nan")


def cpu_seconds(root: int) -> tuple[float, float, float]:
    """CPU seconds (user + system) used so far by the driver, the JVM and the Python workers of a tree
    (a worker that exited since is not counted: compare phases without worker churn)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = [0.0, 0.0, 0.0]
    for pid in [root, *_children(root)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = _rss_and_kind(pid)[1]
        out[0 if pid == root else 1 if kind == "jvm" else 2] += (int(fields[11]) + int(fields[12])) / tick
    return out[0], out[1], out[2]


def commit_ts(table: object) -> float:
    return table.metadata.current_snapshot().timestamp_ms / 1000  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="0: measure the idle phase only")
    parser.add_argument("--big-rows", type=int, default=4_000_000)
    parser.add_argument("--big-append-rows", type=int, default=2_000_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--concurrent-tables", type=int, default=None, help="serve's concurrent_tables")
    parser.add_argument("--scheduler-mode", choices=("fair", "fifo"), default=None, help="serve's spark_scheduler_mode")
    parser.add_argument(
        "--big-start", choices=("earliest", "latest"), default="earliest",
        help="latest: the big table's first rows are not read, so only small batches run until the load rounds",
    )  # fmt: skip
    parser.add_argument("--spark-idle-stop", default=None, help="serve's spark_idle_stop (e.g. 10s); measured after")
    parser.add_argument("--engine", choices=("auto", "spark", "local"), default=None, help="serve's engine")
    parser.add_argument(
        "--big-engine", choices=("auto", "spark", "local"), default=None,
        help="the big table's engine (spark: its batches read on Spark whatever their size)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="icetail-bench-many-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        catalog = build(root, args.tables, args.big_rows)
        print(
            f"serve: concurrent_tables {args.concurrent_tables or 'default (one per table)'}, "
            f"spark_scheduler_mode {args.scheduler_mode or 'default (fair)'}; load {os.getloadavg()[0]:.1f}"
        )
        print(f"built {args.tables} small tables (100 rows each) + big ({args.big_rows:,} rows, 4 files) "
              f"in {time.perf_counter() - start:.1f} s")  # fmt: skip
        consumers = {f"t{i:02d}": f"ns.t{i:02d}" for i in range(args.tables)} | {"big": "ns.big"}
        port = free_port()
        config = {
            "catalog": CATALOG,
            "state": f"sqlite:///{root / 'state.db'}",
            "interval": "1s",
            "metrics_host": "127.0.0.1",
            "metrics_port": port,
            **({} if args.concurrent_tables is None else {"concurrent_tables": args.concurrent_tables}),
            **({} if args.scheduler_mode is None else {"spark_scheduler_mode": args.scheduler_mode}),
            **({} if args.spark_idle_stop is None else {"spark_idle_stop": args.spark_idle_stop}),
            **({} if args.engine is None else {"engine": args.engine}),
            "tables": [
                {"table": t, "consumer": c, "sink": f"parquet://{root / 'sinks' / c}"}
                | ({"start": args.big_start} if c == "big" else {})
                | ({"engine": args.big_engine} if c == "big" and args.big_engine else {})
                for c, t in consumers.items()
            ],
        }
        (root / "icetail.yaml").write_text(yaml.safe_dump(config))
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("ICETAIL_", "PYICEBERG_", "SPARK_", "PYSPARK_"))
        }
        repo = str(Path(__file__).resolve().parents[1])
        env.update(
            {
                f"PYICEBERG_CATALOG__{CATALOG.upper()}__TYPE": "sql",
                f"PYICEBERG_CATALOG__{CATALOG.upper()}__URI": f"sqlite:///{root}/catalog.db",
                f"PYICEBERG_CATALOG__{CATALOG.upper()}__WAREHOUSE": f"file://{root}/warehouse",
                "PYICEBERG_HOME": str(root),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(root / "spark"),
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONPATH": os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p),
            }
        )
        with (root / "serve.stderr").open("wb") as err:
            child = subprocess.Popen(
                [sys.executable, "-m", "icetail", "serve", "--config", str(root / "icetail.yaml")],
                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=root, start_new_session=True,
            )  # fmt: skip
        rss = TreeRss(child.pid)
        launched = time.monotonic()
        try:
            wait_for(lambda: _ready(port), 600, "/readyz 200", child)
            print(f"/readyz 200 {time.monotonic() - launched:.2f} s after the serve process started; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            run(args, catalog, consumers, port, child, rss)
        except BaseException:
            print((root / "serve.stderr").read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            rss.stop()
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait(30)


def _print_peaks(rss: TreeRss, phases: tuple[str, ...], consumers: int) -> None:
    mib = 1 << 20
    for phase in phases:
        p = rss.peaks.get(phase)
        if p is None:
            continue
        print(
            f"max RSS {phase:15} ({consumers} consumers): total {p['total'] / mib:,.0f} MiB = driver "
            f"{p['driver_python'] / mib:,.0f} + JVM {p['jvm'] / mib:,.0f} + Python workers "
            f"{p['python_workers'] / mib:,.0f} MiB (each kind's own max)"
        )


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def _spark_up(port: int) -> float:
    for family in text_string_to_metric_families(_metrics_text(port)):
        for s in family.samples:
            if s.name == "icetail_spark_session_up":
                return float(s.value)
    return -1.0


def _engine_counts(port: int) -> str:
    """Batches by engine (summed over consumers) and Spark session starts, from /metrics."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(_metrics_text(port)):
        for s in family.samples:
            if s.name == "icetail_batches_total":
                counts[s.labels["engine"]] = counts.get(s.labels["engine"], 0) + s.value
            elif s.name == "icetail_spark_session_starts_total":
                counts["spark session starts"] = s.value
    return ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the socket is closed before serve binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: argparse.Namespace, catalog: SqlCatalog, consumers: dict[str, str], port: int,
        child: subprocess.Popen[bytes], rss: TreeRss) -> None:  # fmt: skip
    def heads() -> dict[str, float]:
        return {c: commit_ts(catalog.load_table(t)) for c, t in consumers.items()}

    start = time.perf_counter()
    first = catch_up(port, heads(), child, timeout=600)
    print(f"serve up and every consumer caught up (lag 0) {time.perf_counter() - start:.1f} s after start "
          f"(big table's first read included; slowest consumer {max(first, key=first.__getitem__)})")  # fmt: skip
    rss.phase = "idle"
    cpu_before, wall_before = cpu_seconds(child.pid), time.monotonic()
    time.sleep(args.idle_seconds)
    cpu_after, wall = cpu_seconds(child.pid), time.monotonic() - wall_before
    print(
        f"idle ({len(consumers)} consumers polled every 1 s, nothing new, {wall:.1f} s): CPU seconds per second: "
        f"driver {(cpu_after[0] - cpu_before[0]) / wall:.2f}, JVM {(cpu_after[1] - cpu_before[1]) / wall:.2f}, "
        f"Python workers {(cpu_after[2] - cpu_before[2]) / wall:.2f}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if args.rounds == 0:
        _print_peaks(rss, ("startup", "idle"), len(consumers))
        return
    next_id = dict.fromkeys(consumers, 1000)
    solo: list[float] = []
    solo_batch: list[float] = []
    rss.phase = "solo"
    for r in range(args.rounds):
        before = scrape_surely(port)
        table = catalog.load_table(consumers["t00"])
        table.append(small_rows(next_id["t00"], 10))
        next_id["t00"] += 10
        seconds = catch_up(port, {"t00": commit_ts(table)}, child)["t00"]
        solo.append(seconds)
        batch = batch_seconds(before, scrape_surely(port), "t00")
        solo_batch.append(batch)
        print(
            f"solo round {r + 1}: one small append to t00 alone, caught up in {seconds:.2f} s "
            f"(its batch: {batch:.2f} s, the rest is waiting for its next 1 s tick)"
        )
        time.sleep(1.5)
    small_names = [c for c in consumers if c != "big"]
    small_max, small_median, big_seconds = [], [], []
    for r in range(args.rounds):
        rss.phase = "working"
        before = scrape_surely(port)
        big_batch = big_rows(args.big_rows + r * args.big_append_rows, args.big_append_rows)
        targets = {}
        table = catalog.load_table(consumers["big"])
        table.append(big_batch)
        targets["big"] = commit_ts(table)
        for c in small_names:
            table = catalog.load_table(consumers[c])
            table.append(small_rows(next_id[c], 10))
            next_id[c] += 10
            targets[c] = commit_ts(table)
        spread = max(targets.values()) - min(targets.values())
        done = catch_up(port, targets, child)
        after = scrape_surely(port)
        batches = sorted(batch_seconds(before, after, c) for c in small_names)
        smalls = sorted(done[c] for c in small_names)
        small_max.append(smalls[-1])
        small_median.append(statistics.median(smalls))
        big_seconds.append(done["big"])
        print(
            f"load round {r + 1}: big append {args.big_append_rows:,} rows + 1 append to each of {len(small_names)} "
            f"small tables (commits spread over {spread:.2f} s): small tables caught up in median "
            f"{small_median[-1]:.2f} s, max {small_max[-1]:.2f} s ({max(small_names, key=done.__getitem__)}); "
            f"big {done['big']:.2f} s (its batch {batch_seconds(before, after, 'big'):.2f} s); every small table: "
            f"{', '.join(f'{s:.2f}' for s in smalls)}; small tables' own batches: median "
            f"{statistics.median(batches):.2f} s, max {batches[-1]:.2f} s"
        )
        rss.phase = "between"
        time.sleep(2.0)
    if args.spark_idle_stop is not None:
        rss.phase = "stopping"
        wait_for(lambda: _spark_up(port) == 0, 600, "the idle Spark session stopped", child)
        rss.phase = "after idle stop"
        time.sleep(args.idle_seconds)
    _print_peaks(rss, ("startup", "idle", "working", "after idle stop"), len(consumers))
    print(f"engines: {_engine_counts(port)}")
    print(
        f"summary: interval 1 s; solo small catch-up median {statistics.median(solo):.2f} s, its batch median "
        f"{statistics.median(solo_batch):.2f} s, bound interval + batch {1 + statistics.median(solo_batch):.2f} s "
        f"(rounds {', '.join(f'{s:.2f}' for s in solo)}); under load small max "
        f"{', '.join(f'{s:.2f}' for s in small_max)} s, small median {', '.join(f'{s:.2f}' for s in small_median)} s, "
        f"big {', '.join(f'{s:.2f}' for s in big_seconds)} s"
    )


if __name__ == "__main__":
    main()
