"""Warm rounds of `read_changes`, each next to a raw read of the same files, with per-round probes (issue 37 §2).

The issue's measurement, exactly: one process, one warm-up, then `--rounds` rounds of
`icetail.read_changes` of the 8M appended rows, each followed by the raw threaded read
`pa.concat_tables([pq.read_table(f) for f in files])` of the same files. Every round is printed
with what each process of the tree did in it, from /proc (self plus reaped children, so a worker
that exits mid-round still counts):

* `drv`, `jvm`, `wrk`: user and system CPU seconds, minor and major page faults of the Python
  driver, the JVM and the Python workers (the daemon, or its zygote, and every worker);
* `gc`: the JVM's collections and their milliseconds (its GC MXBeans, through py4j);
* the driver's side of the local handoff (reader/spark/waves.py `_stream_task`): seconds asleep
  waiting for a task's next file (`wait`), taking files (`take`: read, unpickle, unlink), mapping
  and decoding them (`decode`), and the chunks taken;
* `load`: the 1-minute load average at the round's start.

`--ab NAME` alternates two variants of the read within the run (A on odd rounds, B on even), so
both see the same machine: `shm` puts the handoff folder in /dev/shm instead of the temporary
directory; `disk` in the temporary directory (the default before R67, whatever /dev/shm has);
`threadsN` reads the in-process engine's splits N at a time (ICETAIL_LOCAL_THREADS=N; `threads1`:
one after another); `arrowoff` keeps pyarrow's own threads out of its splits (before R67).
`--engine local` reads in this process (reader/local.py) and starts no Spark at all (issue 45 §3):
the JVM and worker columns are then zero. Standalone (a pyiceberg SQL catalog of `bench.generate`'s
files, as `bench.cases.delivered`):

    PYTHONPATH=. .venv-spark4/bin/python -m bench.cases.warm_rounds --rows 8000000 --files 8 --rounds 7
    PYTHONPATH=. .venv-spark4/bin/python -m bench.cases.warm_rounds --engine local --ab threads1 --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import generate as gen  # noqa: E402
from bench.cases.delivered import Target, log, standalone_target  # noqa: E402
from bench.procs import _children, _rss_and_kind  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
KINDS = ("drv", "jvm", "wrk")


def proc_counters() -> dict[str, dict[str, float]]:
    """Per process kind: user, sys (s), minflt, majflt; workers with their reaped children."""
    out = {k: {"user": 0.0, "sys": 0.0, "minflt": 0.0, "majflt": 0.0} for k in KINDS}
    me = os.getpid()
    for pid in [me, *_children(me)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "drv" if pid == me else ("jvm" if _rss_and_kind(pid)[1] == "jvm" else "wrk")
        reaped = kind == "wrk"  # a worker that ended was reaped by the daemon: its counts moved there
        c = out[kind]
        c["minflt"] += int(fields[7]) + (int(fields[8]) if reaped else 0)
        c["majflt"] += int(fields[9]) + (int(fields[10]) if reaped else 0)
        c["user"] += (int(fields[11]) + (int(fields[13]) if reaped else 0)) / TICKS
        c["sys"] += (int(fields[12]) + (int(fields[14]) if reaped else 0)) / TICKS
    return out


def jvm_gc(spark: Any) -> tuple[int, int, int]:
    """Collections, collection milliseconds and JIT compilation milliseconds of the JVM so far
    (its GC MXBeans and its CompilationMXBean); zeros with no Spark (`--engine local`)."""
    if spark is None:
        return 0, 0, 0
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    beans = management.getGarbageCollectorMXBeans()
    count = millis = 0
    for i in range(beans.size()):
        bean = beans.get(i)
        count += max(int(bean.getCollectionCount()), 0)
        millis += max(int(bean.getCollectionTime()), 0)
    return count, millis, int(management.getCompilationMXBean().getTotalCompilationTime())


def jvm_threads() -> dict[str, float]:
    """CPU seconds so far of the JVM's threads, summed by thread name with digits dropped."""
    out: dict[str, float] = {}
    for pid in _children(os.getpid()):
        if _rss_and_kind(pid)[1] != "jvm":
            continue
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            name = "".join(ch for ch in text[text.index("(") + 1 : text.rindex(")")] if not ch.isdigit()).strip()
            fields = text.rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return out


class HandoffClock:
    """The driver's time in the handoff's stream loop, by step (patched into reader/spark/waves.py)."""

    def __init__(self) -> None:
        self.wait = self.take = self.decode = 0.0
        self.chunks = self.polls = 0

    def reset(self) -> dict[str, float]:
        out = {"wait": self.wait, "take": self.take, "decode": self.decode, "chunks": self.chunks, "polls": self.polls}
        self.wait = self.take = self.decode = 0.0
        self.chunks = self.polls = 0
        return out

    def install(self) -> None:
        from icetail.reader.spark import waves

        timed_sleep = self._timed(time.sleep, "wait", "polls")

        class _Time:
            perf_counter = staticmethod(time.perf_counter)
            monotonic = staticmethod(time.monotonic)
            time = staticmethod(time.time)
            sleep = staticmethod(timed_sleep)

        waves.take_published = self._timed(waves.take_published, "take")  # type: ignore[assignment]
        waves.decode = self._timed(waves.decode, "decode", "chunks")  # type: ignore[assignment]
        waves.time = _Time  # type: ignore[assignment]

    def _timed(self, step: Callable[..., Any], seconds: str, count: str | None = None) -> Callable[..., Any]:
        """`step`, adding its wall time to the clock's `seconds` field (and one to `count`) on every call."""

        def timed(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return step(*args)
            finally:
                setattr(self, seconds, getattr(self, seconds) + time.perf_counter() - started)
                if count is not None:
                    setattr(self, count, getattr(self, count) + 1)

        return timed


def raw_read(files: tuple[str, ...]) -> pa.Table:
    """The issue's bar: each file read by pyarrow's threaded reader, the tables concatenated."""
    return pa.concat_tables([pq.read_table(gen.local_path(f)) for f in files])


@contextmanager
def variant(name: str) -> Iterator[None]:
    """The read as it is (`base`), or with one change for an A/B within the run."""
    if name == "base":
        yield
        return
    if name == "shm":
        from icetail.reader.spark import handoff, waves

        made = handoff.new_handoff_dir
        os.makedirs("/dev/shm/icetail-warm", exist_ok=True)

        def in_shm() -> str:
            import tempfile

            return tempfile.mkdtemp(prefix=f"{handoff.HANDOFF_PREFIX}shm-", dir="/dev/shm/icetail-warm")

        waves.new_handoff_dir = in_shm  # type: ignore[assignment]
        try:
            yield
        finally:
            waves.new_handoff_dir = made  # type: ignore[assignment]
        return
    if name == "disk":  # the handoff in the temporary directory on disk, as before R67 (not /dev/shm)
        import tempfile

        os.environ["ICETAIL_HANDOFF_DIR"] = tempfile.gettempdir()
        try:
            yield
        finally:
            del os.environ["ICETAIL_HANDOFF_DIR"]
        return
    if name == "arrowoff":  # the in-process engine as before R67: pyarrow's own threads off in every split
        from icetail.reader import local

        split_chunks = local.split_chunks
        local.split_chunks = lambda *a, arrow_threads, **kw: split_chunks(*a, arrow_threads=False, **kw)  # type: ignore[assignment]
        try:
            yield
        finally:
            local.split_chunks = split_chunks  # type: ignore[assignment]
        return
    if name.startswith("threads") and name[len("threads") :].isdigit():
        os.environ["ICETAIL_LOCAL_THREADS"] = name[len("threads") :]
        try:
            yield
        finally:
            del os.environ["ICETAIL_LOCAL_THREADS"]
        return
    raise ValueError(f"unknown variant {name}")


def measure(t: Target, spark: Any, rounds: int, variants: tuple[str, ...]) -> list[dict[str, Any]]:
    """`spark` None: every read in this process (`engine="local"`)."""
    from icetail.monitor.engine.api import read_changes

    clock = HandoffClock()
    clock.install()

    def one(label: str, read: Callable[[], int], expected: int) -> dict[str, Any]:
        load = os.getloadavg()[0]
        before, gc_before, threads_before = proc_counters(), jvm_gc(spark), jvm_threads()
        clock.reset()
        started = time.perf_counter()
        rows = read()
        seconds = time.perf_counter() - started
        after, gc_after, threads_after = proc_counters(), jvm_gc(spark), jvm_threads()
        if rows != expected:
            raise AssertionError(f"{label} read {rows} rows, expected {expected}")
        entry: dict[str, Any] = {"what": label, "wall": round(seconds, 3), "load": round(load, 2)}
        for kind in KINDS:
            entry[kind] = {k: round(after[kind][k] - before[kind][k], 2) for k in after[kind]}
        entry["gc"] = {"count": gc_after[0] - gc_before[0], "ms": gc_after[1] - gc_before[1]}
        entry["jit_ms"] = gc_after[2] - gc_before[2]
        busy = {k: v - threads_before.get(k, 0.0) for k, v in threads_after.items()}
        entry["jvm_threads"] = {k: round(v, 2) for k, v in sorted(busy.items(), key=lambda kv: -kv[1])[:4] if v > 0}
        entry["handoff"] = {k: round(v, 3) for k, v in clock.reset().items()}
        return entry

    def icetail_read(name: str) -> Callable[[], int]:
        def read() -> int:
            with variant(name):
                engine = "spark" if spark is not None else "local"
                return int(read_changes(t.table, t.from_exclusive, t.to_inclusive, spark=spark, engine=engine).num_rows)

        return read

    def raw() -> int:
        return int(raw_read(t.files).num_rows)

    out: list[dict[str, Any]] = []
    for round_index in range(rounds + 1):  # round 0 is the warm-up, not reported
        name = variants[(round_index - 1) % len(variants)] if round_index else variants[0]
        icetail = one(f"icetail:{name}", icetail_read(name), t.expected_rows)
        base = one("raw", raw, t.expected_rows)
        if round_index == 0:
            if len(variants) > 1:  # every variant warmed once
                for other in variants[1:]:
                    one(f"icetail:{other}", icetail_read(other), t.expected_rows)
            continue
        for entry in (icetail, base):
            entry["round"] = round_index
            out.append(entry)
            log(line(entry))
    return out


def line(e: dict[str, Any]) -> str:
    parts = [f"r{e['round']} {e['what']:14s} {e['wall']:.3f}s load {e['load']:.2f}"]
    for kind in KINDS:
        c = e[kind]
        parts.append(f"{kind} u{c['user']:.2f} s{c['sys']:.2f} mf{int(c['minflt'])} MF{int(c['majflt'])}")
    parts.append(f"gc {e['gc']['count']}/{e['gc']['ms']}ms jit {e['jit_ms']}ms")
    parts.append("jvm threads " + " ".join(f"{k}={v}" for k, v in e["jvm_threads"].items()))
    h = e["handoff"]
    if h["chunks"]:
        parts.append(f"handoff wait {h['wait']:.3f} take {h['take']:.3f} decode {h['decode']:.3f} chunks {h['chunks']}")
    return " | ".join(parts)


def summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    raw = [e["wall"] for e in entries if e["what"] == "raw"]
    out: dict[str, Any] = {"raw": {"rounds": raw, "median": statistics.median(raw)}}
    for what in sorted({e["what"] for e in entries} - {"raw"}):
        walls = [e["wall"] for e in entries if e["what"] == what]
        pairs = [(e["wall"], r["wall"]) for e, r in zip(entries[::2], entries[1::2], strict=True) if e["what"] == what]
        out[what] = {
            "rounds": walls,
            "median": statistics.median(walls),
            "vs_raw_medians": round(statistics.median(raw) / statistics.median(walls), 3),
            "vs_raw_by_round": [round(r / w, 2) for w, r in pairs],
            "max_over_min": round(max(walls) / min(walls), 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cases.warm_rounds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/icetail-warm")
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ab", default="", help="alternate the base read with this variant (shm, threadsN)")
    parser.add_argument("--engine", choices=("spark", "local"), default="spark", help="local: no Spark at all")
    parser.add_argument("--json", default="", help="write every round's figures to this file")
    parser.add_argument("--java-options", default="", help="added to the driver JVM options (A/B)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    target = standalone_target(workdir, args.rows, args.files, args.row_group_rows, args.seed)
    import pyspark

    from icetail.reader.spark.session import DEFAULT_CONF, spark_session

    started = time.perf_counter()
    conf = {}
    if args.java_options:
        key = "spark.driver.extraJavaOptions"
        conf[key] = f"{DEFAULT_CONF[key]} {args.java_options}"
    spark = spark_session("icetail-bench-warm-rounds", conf) if args.engine == "spark" else None
    if spark is not None:
        log(f"driver JVM options: {spark.sparkContext.getConf().get('spark.driver.extraJavaOptions')}")
    up = f"session up in {time.perf_counter() - started:.1f}s" if spark is not None else "in process, no Spark"
    log(f"pyspark {pyspark.__version__}: {up}; cpus {os.cpu_count()}; load {os.getloadavg()}")
    variants = ("base", args.ab) if args.ab else ("base",)
    entries = measure(target, spark, args.rounds, variants)
    result = summary(entries)
    for what, s in result.items():
        extra = f"  {s['vs_raw_medians']}x raw (medians), max/min {s['max_over_min']}" if what != "raw" else ""
        log(f"{what}: median {s['median']:.3f} rounds {s['rounds']}{extra}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"pyspark": pyspark.__version__, "engine": args.engine, "rounds": entries, "summary": result})
        )
    if spark is not None:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
