"""Case `serve`: commit-to-sink latency of an `icetail serve` subprocess with a parquet sink."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import generate as gen
from bench.harness import Context
from bench.results import CaseResult
from bench.session import CATALOG, catalog_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case_serve(ctx: Context) -> CaseResult:
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    result = CaseResult("serve")
    cat, scale = ctx.catalog, ctx.scale
    interval = ctx.args.serve_interval
    table = gen.create_table(cat, "serve")
    schema = gen.arrow_schema()

    def commit(i: int) -> tuple[int, float]:
        rows = gen._rows(schema, ctx.args.seed, 50_000_000 + i, 1_000_000_000 + i * 1000, 100)
        table.append(rows)
        return int(table.current_snapshot().snapshot_id), time.time()

    first, _ = commit(-1)  # a first snapshot; serve starts after it (whenever its consumer is created)
    sink = ctx.workdir / "serve-sink"
    shutil.rmtree(sink, ignore_errors=True)
    state = ctx.workdir / "state-serve.db"
    state.unlink(missing_ok=True)
    port = _free_port()
    env = {**os.environ, **catalog_env(ctx.workdir), "PYSPARK_PYTHON": sys.executable}
    cmd = [
        str(Path(sys.executable).parent / "icetail"),
        "serve",
        "--catalog", CATALOG,
        "--table", cat.ident("serve"),
        "--state", f"sqlite:///{state}",
        "--sink", f"parquet://{sink}",
        "--start", f"snapshot:{first}",
        "--interval", f"{interval}s",
        "--metrics-host", "127.0.0.1",
        "--metrics-port", str(port),
        "--log-level", "WARNING",
    ]  # fmt: skip
    log_path = ctx.workdir / "serve.log"
    seen: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        known: set[str] = set()
        while not stop.is_set():
            if sink.exists():
                for path in sorted(sink.glob("*.parquet")):
                    if path.name in known:
                        continue
                    known.add(path.name)
                    now = time.time()
                    try:
                        ids = pq.read_table(path, columns=["_commit_snapshot_id"]).column(0)
                    except (OSError, pa.ArrowException):
                        known.discard(path.name)
                        continue
                    for sid in set(ids.to_pylist()):
                        seen.setdefault(int(sid), now)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ctx.workdir)
    try:
        rng = random.Random(ctx.args.seed)
        warm, _ = commit(0)  # includes the service's Spark start-up: not counted
        deadline = time.time() + 180
        while warm not in seen:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"icetail serve did not deliver the warm-up snapshot; see {log_path}")
            time.sleep(0.05)
        first_s = time.perf_counter() - started
        commits: dict[int, float] = {}
        for i in range(1, scale.serve_commits + 1):
            time.sleep(rng.uniform(0.0, interval))  # commits land at random points of the poll cycle
            sid, at = commit(i)
            commits[sid] = at
            while sid not in seen and proc.poll() is None:  # one commit in flight at a time
                if time.time() > at + 60:
                    raise RuntimeError(f"snapshot {sid} not delivered within 60 s; see {log_path}")
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        stop.set()
        watcher.join(timeout=5)
    latencies = sorted(seen[s] - at for s, at in commits.items() if s in seen)
    p = lambda q: latencies[min(int(round(q * (len(latencies) - 1))), len(latencies) - 1)]  # noqa: E731
    result.timings = {
        "poll_interval_s": interval,
        "commits": len(commits),
        "delivered": len(latencies),
        "p50_s": round(p(0.5), 3),
        "p95_s": round(p(0.95), 3),
        "max_s": round(latencies[-1], 3),
        "min_s": round(latencies[0], 3),
        "startup_to_first_delivery_s": round(first_s, 1),
    }
    result.ratios = {
        "p50_over_interval": round(p(0.5) / interval, 3),
        "p95_over_interval": round(p(0.95) / interval, 3),
    }
    result.notes.append(
        "latency = first sight of the snapshot's rows in the parquet sink (10 ms polling) - return of the "
        "pyiceberg commit; 100-row appends, one in flight at a time, each after a random 0..interval pause"
    )
    return result
