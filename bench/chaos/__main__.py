"""`python -m bench.chaos --trials N --seed S [--kinds ...] [--stores ...] [--sinks ...] [--faults ...]`

Runs the trials one at a time, or two (`--jobs 2`; each `icetail run` starts a JVM), prints a line per trial and the
per-combination table, and writes everything as JSON (`--out`, default
/tmp/icetail-bench/chaos-<time>.json). Exit status 0 when every trial recovered exactly and every
run stopped by a fault said so in one line, 1 if not, 2 when PostgreSQL is needed and unreachable
(or no sink is left: a bus sink whose server is not listening is skipped, saying so).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `tests.support` is not an installed package
    sys.path.insert(0, str(REPO))

from bench.chaos.bus import BUS_SINKS, unreachable  # noqa: E402
from bench.chaos.disk import can_mount  # noqa: E402
from bench.chaos.java_source import close_java_service  # noqa: E402
from bench.chaos.plan import DISK_FAULTS, FAULTS, KINDS, REPLICAS, SINKS, STORES, TrialSpec, plan_trials  # noqa: E402
from bench.chaos.report import combine, print_table, write_json  # noqa: E402
from bench.chaos.s3 import close_moto  # noqa: E402
from bench.chaos.trial import TrialConfig, TrialResult, run_trial  # noqa: E402


def _choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        picked = tuple(p.strip() for p in text.split(",") if p.strip())
        unknown = [p for p in picked if p not in allowed]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(f"{','.join(unknown) or text!r}: choose from {','.join(allowed)}")
        return picked

    return parse


def _counts(text: str) -> tuple[int, ...]:
    picked = tuple(p.strip() for p in text.split(",") if p.strip())
    if not picked or not all(p.isdigit() and 2 <= int(p) <= 4 for p in picked):
        raise argparse.ArgumentTypeError(f"{text!r}: replica counts between 2 and 4, comma-separated")
    return tuple(int(p) for p in picked)


def _weights(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, n = part.partition("=")
        if name.strip() not in (*KINDS, *STORES, *SINKS, *FAULTS) or not n.strip().isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(f"{part!r}: NAME=N with NAME a kind, store, sink or fault, N >= 1")
        out[name.strip()] = int(n)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kinds", type=_choices(KINDS), default=KINDS, help=",".join(KINDS))
    p.add_argument("--stores", type=_choices(STORES), default=STORES, help=",".join(STORES))
    p.add_argument("--sinks", type=_choices(SINKS), default=SINKS, help=",".join(SINKS))
    p.add_argument("--faults", type=_choices(FAULTS), default=FAULTS, help=",".join(FAULTS))
    p.add_argument(
        "--weight",
        type=_weights,
        default={},
        help="NAME=N[,NAME=N]: a kind, store, sink or fault whose combinations count N times in the plan",
    )
    p.add_argument(
        "--replicas",
        type=_counts,
        default=REPLICAS,
        help="2,3,4: the replica counts a `replicas` trial draws from (seeded)",
    )
    p.add_argument("--rows", type=int, default=TrialConfig.rows, help="rows of the first append")
    p.add_argument("--max-faults", type=int, default=TrialConfig.max_faults, help="faulted runs per trial, 1..N")
    p.add_argument("--horizon", type=float, default=TrialConfig.horizon, help="latest fault moment in a run, s")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--jobs", type=int, choices=(1, 2), default=1, help="trials at a time (each runs its own JVMs)")
    p.add_argument("--keep", action="store_true", help="keep the work folders of trials that passed too")
    p.add_argument("--out", type=Path, default=None, help="the JSON results file")
    return p.parse_args(argv)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # stopped by SIGTERM as by Ctrl-C: the trial's `finally` kills its run and drops its PostgreSQL schemas
    signal.signal(signal.SIGTERM, _interrupt)
    faults = args.faults
    if any(f in DISK_FAULTS for f in faults) and (why := can_mount()):
        faults = tuple(f for f in faults if f not in DISK_FAULTS)
        print(f"chaos: the disk-full faults are skipped: {why}", file=sys.stderr)
    sinks = args.sinks
    for kind in (k for k in sinks if k in BUS_SINKS):
        if down := unreachable(kind):
            sinks = tuple(k for k in sinks if k != kind)
            print(f"chaos: the {kind} sink is skipped: {down}", file=sys.stderr)
    if not sinks:
        print("chaos: no sink left to run a trial into", file=sys.stderr)
        return 2
    specs = plan_trials(args.trials, args.seed, args.kinds, args.stores, sinks, faults, args.weight, args.replicas)
    if any(s.uses_postgresql for s in specs):
        from tests.support.stores import pg_unavailable

        if reason := pg_unavailable():
            print(f"chaos: {reason}", file=sys.stderr)
            return 2
    config = TrialConfig(rows=args.rows, max_faults=args.max_faults, horizon=args.horizon)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="icetail-chaos-"))
    results: list[TrialResult] = []
    started = time.monotonic()
    out = args.out or Path("/tmp/icetail-bench") / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}.json"
    recorded = {k: str(v) for k, v in vars(args).items()}
    done = threading.Lock()

    def one(spec: TrialSpec) -> None:
        result = run_trial(spec, config, root, keep=args.keep)
        with done:  # printed and recorded whole, in the order trials end
            results.append(result)
            print_trial(result, root)
            write_json(out, recorded, results, combine(results))  # after every trial: a stopped run keeps its figures

    try:
        if args.jobs == 1:
            for spec in specs:
                one(spec)
        else:
            with ThreadPoolExecutor(args.jobs, thread_name_prefix="trial") as pool:
                for future in [pool.submit(one, spec) for spec in specs]:
                    future.result()
    finally:
        close_java_service()
        close_moto()
    rows = combine(results)
    print()
    print_table(rows)
    failed = [r for r in results if not r.ok]
    bad = sum(r.bad_lines for r in results)
    print(
        f"\n{len(results)} trials in {time.monotonic() - started:.0f}s, {len(failed)} failed, "
        f"{bad} runs stopped by a fault without one clear line; results: {out}"
    )
    return 1 if failed or bad else 0


def print_trial(r: TrialResult, root: Path) -> None:
    v = r.verdict
    figures = (
        f"lost {v.lost}, dup {v.duplicated}, foreign {v.foreign}, torn {v.torn_lines}, out of order {v.out_of_order}"
        if v
        else "no verdict"
    )
    status = "ok" if r.ok else f"FAILED (kept in {root / f'trial-{r.spec.index:03d}'})"
    print(
        f"trial {r.spec.index} [{r.spec.combo}] seed {r.spec.seed}: {len(r.runs)} runs, {r.faults} faults, "
        f"{figures}, {r.seconds:.0f}s: {status}",
        flush=True,
    )
    for run in r.runs:
        if r.spec.replicas:  # a run is a replica: what was done to it, if anything
            what = f"{run.shot or 'not hurt'} ({run.note})"
        else:
            what = (
                f"{run.shot} ({run.note})"
                if run.fired
                else (f"{run.shot} not reached" if run.shot else "left to finish")
            )
        flags = "".join(f" [{x}]" for x in (run.stage, run.problem, "lease left" if run.lease_left else "") if x)
        print(
            f"  run {run.index}: {what}; exit {run.returncode} after {run.seconds:.1f}s: {run.last_line[:160]!r}{flags}"
        )
    for finding in r.findings:
        print(f"  FINDING: {finding}")
    if v is not None:
        for example in v.examples:
            print(f"    {example}")


if __name__ == "__main__":
    sys.exit(main())
