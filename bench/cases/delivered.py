"""Rows delivered, warm: every path a user gets rows from, against a raw pyarrow decode.

Each round runs every reader once, interleaved with the raw decode of the same files, on a
session that is already up; figures are min / median / max over the rounds (issue 15: the
spread between rounds is a finding of its own). Readers:

* `read_changes` - one Arrow table (`icetail.monitor.engine.api.read_changes`);
* `batch_iterator` - `changes_batch_reader`, batches consumed and dropped one by one;
* `cli_parquet`, `cli_jsonl` - `icetail changes --output X.parquet|X.jsonl`, in this process;
* `run_parquet_sink` - `icetail run --sink parquet:///DIR` from a fresh consumer, in this process;
* `run_iceberg_sink` - `icetail run --sink iceberg://CATALOG/ns.delivered_sink` from a fresh
  consumer into a fresh sink table (created by the sink, dropped after the round), in this process;
  its staged chunks are committed in groups (the default `--sink-commit-rows`);
* `run_iceberg_sink_per_chunk` - the same with `--sink-commit-rows 0`: a sink snapshot per chunk;
* baselines: `raw_decode` (threaded `pyarrow.parquet.read_table` of the files, the issue's bar),
  and `raw_rw_parquet` / `raw_rw_jsonl` (that decode plus the same output written by pyarrow /
  icetail's JSON line encoder: what the writer alone costs).

Standalone (icetail's own session and a pyiceberg SQL catalog, no Java jars; both Spark lines):

    .venv/bin/python -m bench.cases.delivered --rows 8000000 --files 8 --rounds 5
    .venv-spark4/bin/python -m bench.cases.delivered --rows 8000000 --files 8 --rounds 5 --deletes

`--deletes` also measures every path on a DELETE of 10% of the rows (Spark SQL, merge-on-read)
as position deletes (v2) and as deletion vectors (v3): Java Iceberg writes them in a pyspark 3.5
subprocess (`bench.cases.deletes_prep`, `--java-python`, default `.venv/bin/python`), so the
pyspark 4 line reads the same files. Inside `python -m bench.run --cases delivered` (the Java
session), the same paths are measured on both delete kinds in that session.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402
from bench.procs import cpu_by_kind, worker_counters  # noqa: E402

CATALOG = "icebench"
# cli_jsonl is left out by default: JSON encoding costs ~20x the decode (ask for it with --readers)
READERS = ("read_changes", "batch_iterator", "cli_parquet", "run_parquet_sink", "run_iceberg_sink")
OTHER_READERS = ("run_iceberg_sink_per_chunk", "cli_jsonl")


@dataclass(frozen=True)
class Target:
    """What the readers read: table `ident` of catalog `catalog`, changes of (from, to]."""

    catalog: str
    ident: str
    table: Any
    from_exclusive: int | None
    to_inclusive: int
    files: tuple[str, ...]
    expected_rows: int  # change rows of the range
    file_rows: int = 0  # rows of `files`, what the raw baselines decode (0: expected_rows)


@dataclass
class Spread:
    """Seconds of every round, and rows out of the last."""

    runs_s: list[float] = field(default_factory=list)
    cpu_s: list[dict[str, float]] = field(default_factory=list)  # by process kind, per round
    rows: int = 0

    def summary(self) -> dict[str, float]:
        return {
            "min": round(min(self.runs_s), 3),
            "median": round(statistics.median(self.runs_s), 3),
            "max": round(max(self.runs_s), 3),
        }

    def cpu_median(self) -> dict[str, float]:
        """Median CPU seconds by process kind (stabler than wall time on a loaded machine)."""
        kinds = self.cpu_s[0].keys() if self.cpu_s else ()
        return {k: round(statistics.median(c[k] for c in self.cpu_s), 2) for k in kinds}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------
# Readers: each returns the rows it delivered
# --------------------------------------------------------------------------------------------


def _cli(*argv: str) -> None:
    from icetail.monitor.cli.main import main

    code = main(list(argv))
    if code != 0:
        raise RuntimeError(f"icetail {' '.join(argv)} exited {code}")


def _range_args(t: Target) -> list[str]:
    out = ["--catalog", t.catalog, "--table", t.ident, "--to-snapshot", str(t.to_inclusive)]
    if t.from_exclusive is not None:
        out += ["--from-snapshot", str(t.from_exclusive)]
    return out


def read_changes_rows(t: Target, spark: Any, scratch: Path) -> int:
    from icetail.monitor.engine.api import read_changes

    return read_changes(t.table, t.from_exclusive, t.to_inclusive, spark=spark).num_rows


def batch_iterator_rows(t: Target, spark: Any, scratch: Path) -> int:
    from icetail.monitor.engine.api import changes_batch_reader

    return sum(b.num_rows for b in changes_batch_reader(t.table, t.from_exclusive, t.to_inclusive, spark=spark))


def cli_rows(suffix: str) -> Callable[[Target, Any, Path], int]:
    def read(t: Target, spark: Any, scratch: Path) -> int:
        out = scratch / f"changes{suffix}"
        _cli("changes", *_range_args(t), "--output", str(out))
        if suffix == ".parquet":
            rows = pq.ParquetFile(out).metadata.num_rows
        else:
            rows = _lines(out)
        out.unlink()
        return rows

    return read


def _lines(path: Path) -> int:
    """Newlines in `path`, counted in 8 MiB blocks: a Python loop over 1M lines cost ~0.3 s, inside
    the timed call (R16-R21's JSON lines figures include it)."""
    count = 0
    with open(path, "rb") as stream:
        while block := stream.read(8 << 20):
            count += block.count(b"\n")
    return count


def run_parquet_sink_rows(t: Target, spark: Any, scratch: Path) -> int:
    """A fresh consumer from `from_exclusive` to the end, parquet sink; rows counted in its files."""
    sink, state = scratch / "sink", scratch / "state.db"
    start = f"snapshot:{t.from_exclusive}" if t.from_exclusive is not None else "earliest"
    _cli(
        "run",
        "--catalog", t.catalog,
        "--table", t.ident,
        "--state", f"sqlite:///{state}",
        "--sink", f"parquet://{sink}",
        "--start", start,
        "--until-caught-up",
    )  # fmt: skip
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in sink.glob("*.parquet"))
    shutil.rmtree(sink)
    state.unlink()
    return rows


SINK_TABLE = "ns.delivered_sink"
DELETE_LABELS = {"pos": "10% position deletes (v2)", "dv": "10% deletion vectors (v3)"}


def run_iceberg_sink_rows(t: Target, spark: Any, scratch: Path, *extra: str) -> int:
    """A fresh consumer from `from_exclusive` to the end into a fresh Iceberg sink table; its row count.

    With the default sink commit groups (commit_group.py); `extra` flags are added to `run`.
    """
    from pyiceberg.catalog import load_catalog

    state = scratch / "state-iceberg.db"
    start = f"snapshot:{t.from_exclusive}" if t.from_exclusive is not None else "earliest"
    _cli(
        "run",
        "--catalog", t.catalog,
        "--table", t.ident,
        "--state", f"sqlite:///{state}",
        "--sink", f"iceberg://{t.catalog}/{SINK_TABLE}",
        "--start", start,
        "--until-caught-up",
        *extra,
    )  # fmt: skip
    catalog = load_catalog(t.catalog)
    sink = catalog.load_table(SINK_TABLE)
    snapshot = sink.current_snapshot()
    rows = int(snapshot.summary["total-records"]) if snapshot is not None and snapshot.summary else 0
    catalog.drop_table(SINK_TABLE)
    shutil.rmtree(gen.local_path(sink.location()), ignore_errors=True)
    state.unlink()
    return rows


def run_iceberg_sink_per_chunk_rows(t: Target, spark: Any, scratch: Path) -> int:
    """`run_iceberg_sink` committing every chunk as its own snapshot (`--sink-commit-rows 0`, as before groups)."""
    return run_iceberg_sink_rows(t, spark, scratch, "--sink-commit-rows", "0")


def drop_sink_table(catalog_name: str) -> None:
    """A sink table left by an interrupted run would make the next round's counts wrong."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(catalog_name)
    if catalog.table_exists(SINK_TABLE):
        location = gen.local_path(catalog.load_table(SINK_TABLE).location())
        catalog.drop_table(SINK_TABLE)
        shutil.rmtree(location, ignore_errors=True)


def raw_decode(files: tuple[str, ...]) -> pa.Table:
    return pq.read_table([gen.local_path(f) for f in files], use_threads=True)


def raw_decode_rows(t: Target, spark: Any, scratch: Path) -> int:
    return raw_decode(t.files).num_rows


def raw_rw_parquet_rows(t: Target, spark: Any, scratch: Path) -> int:
    table = raw_decode(t.files)
    out = scratch / "raw.parquet"
    pq.write_table(table, out)
    out.unlink()
    return table.num_rows


def raw_rw_jsonl_rows(t: Target, spark: Any, scratch: Path) -> int:
    from icetail.sinks.files.jsonl_encoding import write_jsonl_to

    table = raw_decode(t.files)
    out = scratch / "raw.jsonl"
    with open(out, "w", encoding="utf-8") as stream:
        write_jsonl_to(stream, table)
    out.unlink()
    return table.num_rows


ALL_READERS: dict[str, Callable[[Target, Any, Path], int]] = {
    "raw_decode": raw_decode_rows,
    "read_changes": read_changes_rows,
    "batch_iterator": batch_iterator_rows,
    "cli_parquet": cli_rows(".parquet"),
    "raw_rw_parquet": raw_rw_parquet_rows,
    "run_parquet_sink": run_parquet_sink_rows,
    "run_iceberg_sink": run_iceberg_sink_rows,
    "run_iceberg_sink_per_chunk": run_iceberg_sink_per_chunk_rows,
    "cli_jsonl": cli_rows(".jsonl"),
    "raw_rw_jsonl": raw_rw_jsonl_rows,
}
BASELINE_OF = {
    "cli_parquet": "raw_rw_parquet",
    "run_parquet_sink": "raw_rw_parquet",
    "run_iceberg_sink": "raw_rw_parquet",
    "run_iceberg_sink_per_chunk": "raw_rw_parquet",
    "cli_jsonl": "raw_rw_jsonl",
}


def measure(t: Target, spark: Any, rounds: int, readers: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`rounds` interleaved rounds of every reader after one warm-up round; min/median/max and ratios."""
    chosen = {k: v for k, v in ALL_READERS.items() if readers is None or k in readers or k.startswith("raw")}
    if readers is not None and "cli_jsonl" not in readers:
        chosen.pop("raw_rw_jsonl", None)
    writers = {"cli_parquet", "run_parquet_sink", "run_iceberg_sink", "run_iceberg_sink_per_chunk"}
    if readers is not None and not writers & set(readers):
        chosen.pop("raw_rw_parquet", None)
    spreads = {name: Spread() for name in chosen}
    if {"run_iceberg_sink", "run_iceberg_sink_per_chunk"} & set(chosen):
        drop_sink_table(t.catalog)
    scratch = Path(tempfile.mkdtemp(prefix="icetail-delivered-"))
    try:
        for round_index in range(rounds + 1):  # round 0 warms the workers, caches and page cache
            for name, read in chosen.items():
                cpu_before, workers_before = cpu_by_kind(), worker_counters()
                started = time.perf_counter()
                rows = read(t, spark, scratch)
                seconds = time.perf_counter() - started
                cpu = {k: v - cpu_before[k] for k, v in cpu_by_kind().items()}
                workers_after = worker_counters()
                cpu |= {f"w_{k}": workers_after[k] - workers_before[k] for k in ("user", "system", "minor_faults")}
                cpu["w_count"] = workers_after["workers"]
                expected = (t.file_rows or t.expected_rows) if name.startswith("raw") else t.expected_rows
                if rows != expected:
                    raise AssertionError(f"{name} delivered {rows} rows, expected {expected}")
                if round_index > 0:
                    spreads[name].runs_s.append(seconds)
                    spreads[name].cpu_s.append(cpu)
                    spreads[name].rows = rows
            if round_index > 0:
                log(f"round {round_index}: " + ", ".join(f"{n} {s.runs_s[-1]:.2f}s" for n, s in spreads.items()))
                for n, s in spreads.items():  # where each round's CPU went: a slow round's cause shows here
                    log(f"  {n} cpu " + " ".join(f"{k} {v:.2f}" for k, v in s.cpu_s[-1].items()))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    raw = statistics.median(spreads["raw_decode"].runs_s)
    out: dict[str, Any] = {
        "rows": t.expected_rows,
        "seconds": {n: s.summary() for n, s in spreads.items()},
        "cpu_s_median": {n: s.cpu_median() for n, s in spreads.items()},
    }
    ratios: dict[str, Any] = {}
    for name, spread in spreads.items():
        if name.startswith("raw"):
            continue
        summary = spread.summary()
        entry = {
            "vs_raw_decode_median": round(raw / summary["median"], 3),
            # round by round: the reader against the raw decode of the same round
            "vs_raw_decode_by_round": [
                round(r / s, 3) for r, s in zip(spreads["raw_decode"].runs_s, spread.runs_s, strict=True)
            ],
            "max_over_min": round(summary["max"] / summary["min"], 2),
        }
        entry["vs_raw_decode_round_median"] = round(statistics.median(entry["vs_raw_decode_by_round"]), 3)
        if name in BASELINE_OF and BASELINE_OF[name] in spreads:
            entry["vs_" + BASELINE_OF[name] + "_median"] = round(
                statistics.median(spreads[BASELINE_OF[name]].runs_s) / summary["median"], 3
            )
        ratios[name] = entry
    out["ratios"] = ratios
    return out


def print_report(title: str, report: dict[str, Any]) -> None:
    print(f"\n== {title}: {report['rows']:,} rows; seconds min / median / max", flush=True)
    for name, s in report["seconds"].items():
        r = report["ratios"].get(name)
        extra = ""
        if r:
            by_round = r["vs_raw_decode_round_median"]
            extra = f"  {r['vs_raw_decode_median']:.2f}x raw decode (medians; by round {by_round:.2f}x)"
            extra += f", max/min {r['max_over_min']}"
            extra += "".join(f", {k} {v:.2f}x" for k, v in r.items() if k.startswith("vs_raw_rw"))
        print(f"  {name:18s} {s['min']:7.3f} {s['median']:7.3f} {s['max']:7.3f}{extra}")
        print(f"  {'':18s} cpu s (median) {report['cpu_s_median'][name]}")


# --------------------------------------------------------------------------------------------
# Inside bench.run (the Java session: appends and 10% position deletes)
# --------------------------------------------------------------------------------------------


def case_delivered(ctx: Any) -> Any:
    from bench.results import CaseResult, Goal

    result = CaseResult("delivered")
    cat, data, rounds = ctx.catalog, ctx.data, max(ctx.scale.repeat, 5)
    gen.create_table(cat, "delivered")
    seed = gen.seed_snapshot(cat, "delivered", data)
    appended = gen.add_files(cat, "delivered", data.files)
    table = cat.load_table("delivered")
    append = Target(CATALOG, cat.ident("delivered"), table, seed, appended, data.files, ctx.scale.rows)
    log("  delivered/append: measuring")
    report = measure(append, ctx.spark, rounds, READERS)
    print_report("delivered/append", report)
    result.notes.append(f"append: {report}")
    for name, r in report["ratios"].items():
        result.ratios[f"append/{name}/vs_raw_decode_median"] = r["vs_raw_decode_median"]
        ok = r["vs_raw_decode_median"] >= 0.8 and r["max_over_min"] <= 1.2
        result.goals.append(
            Goal(
                f"delivered append {name} (median; max/min {r['max_over_min']})",
                ">= 0.8x, spread <= 20%",
                r["vs_raw_decode_median"],
                ok,
            )
        )
    for name, version in (("pos", 2), ("dv", 3)):
        table_name = f"delivered_{name}"
        gen.create_table(cat, table_name)
        gen.seed_snapshot(cat, table_name, data)
        appended = gen.add_files(cat, table_name, data.files)
        if version == 3:
            gen.upgrade_to_v3(cat, table_name)
        deleted = gen.spark_delete(cat, table_name, "id % 10 = 7")
        target = Target(
            CATALOG, cat.ident(table_name), cat.load_table(table_name), appended, deleted, data.files,
            ctx.scale.rows // 10, ctx.scale.rows,
        )  # fmt: skip
        label = DELETE_LABELS[name]
        log(f"  delivered/{name}: measuring")
        report = measure(target, ctx.spark, rounds, READERS)
        print_report(f"delivered/{label}", report)
        result.notes.append(f"{name}: {report}")
        for reader, r in report["ratios"].items():
            result.ratios[f"{name}/{reader}/vs_raw_decode_median"] = r["vs_raw_decode_median"]
            value = r["vs_raw_decode_median"]
            result.goals.append(Goal(f"delivered {label} {reader}", ">= 0.7x", value, value >= 0.7))
    return result


# --------------------------------------------------------------------------------------------
# Standalone: icetail's own session, pyiceberg only (runs on both Spark lines)
# --------------------------------------------------------------------------------------------


def standalone_target(workdir: Path, rows: int, files: int, row_group_rows: int, seed: int) -> Target:
    """The data set registered in a fresh pyiceberg SQL catalog under `workdir/delivered-catalog`."""
    root = workdir / "delivered-catalog"
    shutil.rmtree(root, ignore_errors=True)
    (root / "warehouse").mkdir(parents=True)
    key = CATALOG.upper()
    os.environ.update(
        {
            f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
            f"PYICEBERG_CATALOG__{key}__URI": f"sqlite:///{root.resolve() / 'catalog.db'}",
            f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{(root / 'warehouse').resolve()}",
        }
    )
    from pyiceberg.catalog import load_catalog

    scale = gen.scale_with(gen.SCALES["small"], rows=rows, files=files, row_group_rows=row_group_rows)
    data = gen.generate(workdir, scale, seed, log=log)
    catalog = load_catalog(CATALOG)
    catalog.create_namespace("ns")

    tables = gen.PyicebergTables(catalog)
    gen.create_table(tables, "delivered")
    first = gen.seed_snapshot(tables, "delivered", data)
    last = gen.add_files(tables, "delivered", data.files)
    return Target(CATALOG, "ns.delivered", tables.load_table("delivered"), first, last, data.files, scale.rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.delivered", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/icetail-bench")
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--readers", default=",".join(READERS), help=f"subset of {','.join(READERS + OTHER_READERS)}")
    parser.add_argument("--deletes", action="store_true", help="also 10%% position deletes and deletion vectors")
    parser.add_argument(
        "--java-python", default=str(REPO / ".venv" / "bin" / "python"), help="pyspark 3.5 interpreter with the jars"
    )
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if args.deletes:
        os.environ.update(deletes_catalog_env(workdir))
    target = standalone_target(workdir, args.rows, args.files, args.row_group_rows, args.seed)
    import pyspark

    from icetail.reader.spark.session import spark_session

    started = time.perf_counter()
    spark = spark_session("icetail-bench-delivered")
    log(f"pyspark {pyspark.__version__}: session up in {time.perf_counter() - started:.1f}s; load {os.getloadavg()}")
    readers = tuple(r.strip() for r in args.readers.split(",") if r.strip())
    delete_targets = delete_snapshots(args, workdir) if args.deletes else {}
    report = measure(target, spark, args.rounds, readers)
    print_report(f"delivered/append (pyspark {pyspark.__version__}; load {os.getloadavg()[0]:.2f})", report)
    for name, delete_target in delete_targets.items():
        report = measure(delete_target, spark, args.rounds, readers)
        label = DELETE_LABELS[name]
        print_report(f"delivered/{label} (pyspark {pyspark.__version__}; load {os.getloadavg()[0]:.2f})", report)
    spark.stop()
    return 0


def deletes_catalog_env(workdir: Path) -> dict[str, str]:
    """PYICEBERG_* for the catalog deletes_prep writes (set before pyiceberg is first imported)."""
    from bench.cases.deletes_prep import CATALOG as DELETES_CATALOG
    from bench.cases.deletes_prep import catalog_root

    root = catalog_root(workdir).resolve()
    key = DELETES_CATALOG.upper()
    return {
        f"PYICEBERG_CATALOG__{key}__TYPE": "sql",
        f"PYICEBERG_CATALOG__{key}__URI": f"sqlite:///{root / 'catalog.db'}",
        f"PYICEBERG_CATALOG__{key}__WAREHOUSE": f"file://{root / 'warehouse'}",
    }


def delete_snapshots(args: argparse.Namespace, workdir: Path) -> dict[str, Target]:
    """The DELETE snapshots written by Java in a pyspark 3.5 child (bench.cases.deletes_prep), as targets."""
    import json
    import subprocess

    from bench.cases.deletes_prep import CATALOG as DELETES_CATALOG

    cmd = [args.java_python, "-m", "bench.cases.deletes_prep", "--workdir", str(workdir), "--rows", str(args.rows),
           "--files", str(args.files), "--row-group-rows", str(args.row_group_rows),
           "--seed", str(args.seed)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYICEBERG_", "SPARK_HOME", "PYSPARK_"))}
    log(f"writing the delete snapshots with Java: {' '.join(cmd)}")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"deletes_prep failed ({done.returncode}):\n{done.stderr[-3000:]}")
    made = json.loads(done.stdout.strip().splitlines()[-1])  # in the catalog deletes_catalog_env() names
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(DELETES_CATALOG)
    scale = gen.scale_with(gen.SCALES["small"], rows=args.rows, files=args.files, row_group_rows=args.row_group_rows)
    data = gen.generate(workdir, scale, args.seed, log=log)
    return {
        name: Target(
            DELETES_CATALOG,
            f"ns.{name}",
            catalog.load_table(f"ns.{name}"),
            ids["appended"],
            ids["deleted"],
            data.files,
            args.rows // 10,
            args.rows,
        )  # fmt: skip
        for name, ids in made["tables"].items()
    }


if __name__ == "__main__":
    sys.exit(main())
