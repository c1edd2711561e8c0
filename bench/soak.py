"""A long `icetail serve`: thousands of short cycles with a commit before each; does anything grow?

    .venv/bin/python -m bench.soak [--cycles 10000] [--tables 2] [--sample-every 100] [--max-minutes M] [--out DIR]

Builds `--tables` small pyiceberg tables in a SQL catalog on SQLite in a temp dir and starts `icetail
serve` as a child (`python -m icetail serve --config FILE`: every table in the `tables:` list,
`--interval` 50 ms, parquet sinks, SQLite state). Then, round after round, a writer appends 10 rows
to every table (one snapshot each) and waits until /metrics shows every consumer's cursor at its
new snapshot with lag 0: each table's batch is one cycle, so a round is `--tables` cycles. Every
`--expire-every` rounds the writer expires each table's snapshots but the newest 3 (the consumers
are at the newest), and the tables merge their manifests (`commit.manifest-merge.enabled`), so
the tables' own metadata stays the same size and what is left to grow is icetail's.

Every `--sample-every` cycles one CSV row: the serve process tree's RSS (driver, JVM, Python
workers; /proc), its threads (`Threads:` of each process) and open file descriptors (/proc/PID/fd),
the state database's bytes on disk (the SQLite file with its -wal and -shm) and its rows per table,
the sink's file count, and the mean seconds per cycle since the last row. At the end: the slope of
each measure per 1,000 cycles over the second half of the run (after warm-up), a least-squares
line, printed and written beside the CSV with an SVG plot of every measure (`soak.csv`,
`soak.svg`, `soak-summary.txt` in `--out`).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml
from pyiceberg.catalog.sql import SqlCatalog

from bench.many_tables import SMALL, free_port, scrape, small_rows
from bench.procs import _children, _rss_and_kind

CATALOG = "soak"  # lower-case letters only: pyiceberg's env catalog naming
KEEP_SNAPSHOTS = 3
STATE_TABLES = (
    "icetail_consumers",
    "icetail_inflight_batches",
    "icetail_inflight_splits",
    "icetail_history",
    "icetail_stopped_consumers",
)
MIB = 1 << 20
COLUMNS = (
    "cycle",
    "elapsed_s",
    "seconds_per_cycle",
    "rss_total_mib",
    "rss_driver_mib",
    "rss_jvm_mib",
    "rss_workers_mib",
    "threads",
    "threads_driver",
    "threads_jvm",
    "open_fds",
    "open_fds_driver",
    "state_db_bytes",
    "history_rows",
    "inflight_split_rows",
    "sink_files",
    "manifest_cache_entries",
)


def tree(root: int) -> list[int]:
    return [root, *_children(root)]


def proc_field(pid: int, name: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(name + ":")), 0)
    except OSError:
        return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def manifest_cache_entries(port: int) -> float:
    """What serve's shared manifest cache holds (`icetail_manifest_cache_entries`), NaN if unread."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return float("nan")
    for line in text.splitlines():
        if line.startswith("icetail_manifest_cache_entries "):
            return float(line.split()[1])
    return float("nan")


def state_rows(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in STATE_TABLES}


def sample(
    root: int, port: int, cycle: int, elapsed: float, per_cycle: float, state_db: Path, sinks: Path
) -> dict[str, float]:
    rss = {"python": 0, "jvm": 0, "workers": 0}
    threads = {"driver": 0, "jvm": 0, "all": 0}
    fds = {"driver": 0, "all": 0}
    for pid in tree(root):
        size, kind = _rss_and_kind(pid)
        if kind == "gone":
            continue
        role = "python" if pid == root else ("jvm" if kind == "jvm" else "workers")
        rss[role] += size
        count = proc_field(pid, "Threads")
        threads["all"] += count
        opened = fd_count(pid)
        fds["all"] += opened
        if pid == root:
            threads["driver"], fds["driver"] = count, opened
        elif kind == "jvm":
            threads["jvm"] += count
    db_bytes = sum(p.stat().st_size for p in state_db.parent.glob(state_db.name + "*") if p.is_file())
    rows = state_rows(state_db)
    return {
        "cycle": cycle,
        "elapsed_s": round(elapsed, 1),
        "seconds_per_cycle": round(per_cycle, 4),
        "rss_total_mib": round(sum(rss.values()) / MIB, 1),
        "rss_driver_mib": round(rss["python"] / MIB, 1),
        "rss_jvm_mib": round(rss["jvm"] / MIB, 1),
        "rss_workers_mib": round(rss["workers"] / MIB, 1),
        "threads": threads["all"],
        "threads_driver": threads["driver"],
        "threads_jvm": threads["jvm"],
        "open_fds": fds["all"],
        "open_fds_driver": fds["driver"],
        "state_db_bytes": db_bytes,
        "history_rows": rows["icetail_history"],
        "inflight_split_rows": rows["icetail_inflight_splits"],
        "sink_files": sum(1 for p in sinks.rglob("*.parquet")),
        "manifest_cache_entries": manifest_cache_entries(port),
    }


def slope_per_1000(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs, per 1,000 x."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def svg_plot(rows: list[dict[str, float]], measures: Sequence[str], title: str) -> str:
    """Small multiples, one panel per measure against the cycle: a dependency-free SVG."""
    width, height, pad, cols = 420, 200, 46, 2
    rows_n = (len(measures) + cols - 1) // cols
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * cols}" height="{height * rows_n + 30}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="18" font-size="14">{title}</text>',
    ]
    xs = [r["cycle"] for r in rows]
    for i, name in enumerate(measures):
        ox, oy = (i % cols) * width, 30 + (i // cols) * height
        ys = [r[name] for r in rows]
        lo, hi = min(ys), max(ys)
        if hi == lo:
            lo, hi = lo - 1, hi + 1
        x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1

        def px(x: float, ox: int = ox, x0: float = x0, x1: float = x1) -> float:
            return ox + pad + (x - x0) / (x1 - x0) * (width - pad - 12)

        def py(y: float, oy: int = oy, lo: float = lo, hi: float = hi) -> float:
            return oy + height - 28 - (y - lo) / (hi - lo) * (height - 50)

        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
        out += [
            f'<rect x="{ox + pad}" y="{oy + 22}" width="{width - pad - 12}" height="{height - 50}" '
            'fill="none" stroke="#ccc"/>',
            f'<text x="{ox + pad}" y="{oy + 16}">{name}</text>',
            f'<text x="{ox + 2}" y="{py(hi) + 4:.1f}">{hi:.4g}</text>',
            f'<text x="{ox + 2}" y="{py(lo) + 4:.1f}">{lo:.4g}</text>',
            f'<text x="{ox + pad}" y="{oy + height - 12}">cycle {x0:.0f}</text>',
            f'<text x="{ox + width - 70}" y="{oy + height - 12}">{x1:.0f}</text>',
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="{points}"/>',
        ]
    out.append("</svg>")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument("--expire-every", type=int, default=50, help="rounds between snapshot expiries")
    parser.add_argument("--interval", default="50ms")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop earlier, after this long")
    parser.add_argument("--history-retention", type=int, default=None, help="serve's history_retention")
    parser.add_argument(
        "--manifest-cache-entries", type=int, default=None,
        help="serve's manifest_cache_entries (default 250,000): a small bound fills early, so the "
        "driver's memory is flat after it if the cache is what grows",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench/results/soak"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="icetail-bench-soak-") as tmp:
        run(args, Path(tmp))


def run(args: argparse.Namespace, root: Path) -> None:
    (root / "warehouse").mkdir()
    catalog = SqlCatalog(CATALOG, uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("ns")
    names = [f"ns.s{i}" for i in range(args.tables)]
    for name in names:
        catalog.create_table(name, schema=SMALL, properties={"commit.manifest-merge.enabled": "true"}).append(
            small_rows(0, 10)
        )
    port = free_port()
    state_db = root / "state.db"
    config = {
        "catalog": CATALOG,
        "state": f"sqlite:///{state_db}",
        "interval": args.interval,
        "metrics_host": "127.0.0.1",
        "metrics_port": port,
        **({} if args.history_retention is None else {"history_retention": args.history_retention}),
        **({} if args.manifest_cache_entries is None else {"manifest_cache_entries": args.manifest_cache_entries}),
        "tables": [
            {"table": t, "consumer": t.split(".")[1], "sink": f"parquet://{root / 'sinks' / t.split('.')[1]}"}
            for t in names
        ],
    }
    (root / "icetail.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ICETAIL_", "PYICEBERG_", "SPARK_", "PYSPARK_"))}
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
    print(f"soak: {args.tables} tables, {args.cycles:,} cycles, interval {args.interval}, sample every "
          f"{args.sample_every}; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    with (root / "serve.stderr").open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "icetail", "serve", "--config", str(root / "icetail.yaml")],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=root, start_new_session=True,
        )  # fmt: skip
    try:
        rows = soak(args, catalog, names, port, child, state_db, root / "sinks")
    except BaseException:
        print((root / "serve.stderr").read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait(30)
    report(args, rows)


def soak(args: argparse.Namespace, catalog: SqlCatalog, names: list[str], port: int,
         child: subprocess.Popen[bytes], state_db: Path, sinks: Path) -> list[dict[str, float]]:  # fmt: skip
    consumers = {t: t.split(".")[1] for t in names}
    tables = {t: catalog.load_table(t) for t in names}
    next_id = dict.fromkeys(names, 1000)
    rows: list[dict[str, float]] = []
    out = args.out / "soak.csv"
    with out.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        writer.writeheader()
        wait_caught_up(port, dict.fromkeys(consumers.values(), 0.0), child, timeout=600)
        start = last_time = time.monotonic()
        cycle = last_cycle = 0
        rounds = 0
        stop_at = None if args.max_minutes is None else start + 60 * args.max_minutes
        while cycle < args.cycles and (stop_at is None or time.monotonic() < stop_at):
            targets = {}
            for name in names:
                table = tables[name]
                table.append(small_rows(next_id[name], 10))
                next_id[name] += 10
                targets[consumers[name]] = table.metadata.current_snapshot().timestamp_ms / 1000  # type: ignore[union-attr]
            wait_caught_up(port, targets, child, timeout=300)
            cycle += len(names)
            rounds += 1
            if rounds % args.expire_every == 0:
                for name in names:
                    tables[name] = expire_all_but_newest(tables[name])
            out_of_time = stop_at is not None and time.monotonic() >= stop_at
            if cycle - last_cycle >= args.sample_every or cycle >= args.cycles or out_of_time:
                now = time.monotonic()
                per_cycle = (now - last_time) / (cycle - last_cycle)
                row = sample(child.pid, port, cycle, now - start, per_cycle, state_db, sinks)
                writer.writerow(row)
                stream.flush()
                rows.append(row)
                last_time, last_cycle = now, cycle
                print(
                    f"cycle {cycle:>6}: {row['seconds_per_cycle']:.3f} s/cycle, RSS {row['rss_total_mib']:.0f} MiB "
                    f"(driver {row['rss_driver_mib']:.0f}, JVM {row['rss_jvm_mib']:.0f}, workers "
                    f"{row['rss_workers_mib']:.0f}), threads {row['threads']:.0f}, fds {row['open_fds']:.0f}, state "
                    f"{row['state_db_bytes'] / 1024:.0f} KiB ({row['history_rows']:.0f} history rows), manifest cache "
                    f"{row['manifest_cache_entries']:.0f}, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    return rows


def expire_all_but_newest(table: object) -> object:
    """Expire every snapshot but the newest KEEP_SNAPSHOTS (the consumers are at the newest)."""
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)  # type: ignore[attr-defined]
    old = [s.snapshot_id for s in snapshots[:-KEEP_SNAPSHOTS]]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()  # type: ignore[attr-defined]
    return table


def wait_caught_up(port: int, targets: dict[str, float], child: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(targets)
    while pending:
        if child.poll() is not None:
            raise RuntimeError(f"serve exited ({child.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out; still behind: {sorted(pending)}")
        samples = scrape(port) or {}
        for consumer, ts in list(pending.items()):
            cursor = samples.get(("icetail_cursor_commit_timestamp_seconds", consumer))
            if cursor is not None and cursor >= ts - 1e-3 and samples.get(("icetail_lag_snapshots", consumer)) == 0:
                del pending[consumer]
        if pending:
            time.sleep(0.02)


def report(args: argparse.Namespace, rows: list[dict[str, float]]) -> None:
    half = [r for r in rows if r["cycle"] > rows[-1]["cycle"] / 2] if rows else []
    measures = [c for c in COLUMNS if c not in ("cycle", "elapsed_s")]
    lines = [
        f"soak: {rows[-1]['cycle'] if rows else 0:.0f} cycles on {args.tables} tables in "
        f"{rows[-1]['elapsed_s'] if rows else 0:.0f} s; slope per 1,000 cycles over the second half "
        f"(cycles {half[0]['cycle'] if half else 0:.0f}-{half[-1]['cycle'] if half else 0:.0f}), first and last value:"
    ]
    for name in measures:
        if not half:
            break
        slope = slope_per_1000([r["cycle"] for r in half], [r[name] for r in half])
        lines.append(f"  {name:22} {slope:+12.4f} /1000 cycles   ({rows[0][name]:g} -> {rows[-1][name]:g})")
    text = "\n".join(lines)
    print(text)
    (args.out / "soak-summary.txt").write_text(text + "\n")
    plotted = [m for m in measures if m not in ("inflight_split_rows",)]
    (args.out / "soak.svg").write_text(svg_plot(rows, plotted, f"icetail serve soak, {args.tables} tables"))
    print(f"wrote {args.out / 'soak.csv'}, {args.out / 'soak.svg'}, {args.out / 'soak-summary.txt'}")


if __name__ == "__main__":
    main()
