"""The per-combination table, printed and written as JSON next to the bench results."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.chaos.trial import TrialResult


@dataclass
class ComboRow:
    combo: str
    trials: int = 0
    faults: int = 0  # faults that fired (a run may finish before its fault's moment)
    runs: int = 0
    recovered: int = 0  # trials that caught up with the sink checked exact (at least once: complete)
    lost: int = 0
    duplicated: int = 0  # exactly-once sinks; jsonl repeats are in `repeats`
    repeats: int = 0
    bad_lines: int = 0
    leases_left: int = 0
    seconds: float = 0.0


def combine(results: list[TrialResult]) -> list[ComboRow]:
    rows: dict[str, ComboRow] = defaultdict(lambda: ComboRow(""))
    for r in results:
        row = rows[r.spec.combo]
        row.combo = r.spec.combo
        row.trials += 1
        row.faults += r.faults
        row.runs += len(r.runs)
        row.recovered += int(r.ok)
        row.bad_lines += r.bad_lines
        row.leases_left += sum(1 for run in r.runs if run.lease_left and run.shot and not run.shot.startswith(KILLS))
        row.seconds += r.seconds
        if r.verdict is not None:
            row.lost += r.verdict.lost
            if r.spec.sink == "jsonl":
                row.repeats += r.verdict.duplicated
            else:
                row.duplicated += r.verdict.duplicated + r.verdict.foreign
    return sorted(rows.values(), key=lambda x: x.combo)


KILLS = ("sigkill", "reset-sink", "keyed-kill", "sink-writer+kill")  # nothing releases a lease under SIGKILL

HEADER = (
    f"{'kind store sink fault':48s} {'trials':>6s} {'faults':>6s} {'runs':>5s} {'recov':>5s} "
    f"{'lost':>5s} {'dup':>5s} {'rep':>5s} {'badln':>5s} {'lease':>5s} {'s/trial':>7s}"
)


def print_table(rows: list[ComboRow]) -> None:
    print(HEADER)
    total = ComboRow("total")
    for row in rows:
        _print_row(row)
        for name in ("trials", "faults", "runs", "recovered", "lost", "duplicated", "repeats", "bad_lines"):
            setattr(total, name, getattr(total, name) + getattr(row, name))
        total.leases_left += row.leases_left
        total.seconds += row.seconds
    _print_row(total)


def _print_row(row: ComboRow) -> None:
    per = row.seconds / row.trials if row.trials else 0.0
    print(
        f"{row.combo:48s} {row.trials:6d} {row.faults:6d} {row.runs:5d} {row.recovered:5d} {row.lost:5d} "
        f"{row.duplicated:5d} {row.repeats:5d} {row.bad_lines:5d} {row.leases_left:5d} {per:7.1f}"
    )


def trial_json(r: TrialResult) -> dict[str, Any]:
    return {
        "spec": asdict(r.spec),
        "ok": r.ok,
        "caught_up": r.caught_up,
        "seconds": round(r.seconds, 1),
        "verdict": asdict(r.verdict) if r.verdict else None,
        "runs": [asdict(run) | {"seconds": round(run.seconds, 2)} for run in r.runs],
        "findings": list(r.findings),
    }


def write_json(path: Path, args: dict[str, Any], results: list[TrialResult], rows: list[ComboRow]) -> None:
    from bench.report import machine

    facts = machine()
    facts["command"] = " ".join(["python", "-m", "bench.chaos", *sys.argv[1:]])
    doc = {
        "kind": "chaos",
        "machine": facts,
        "args": args,
        "finished_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "combinations": [asdict(row) | {"seconds": round(row.seconds, 1)} for row in rows],
        "trials": [trial_json(r) for r in results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))


def markdown(doc: dict[str, Any], by: tuple[int, ...] = (0, 1, 2, 3)) -> str:
    """A results file's combinations as a markdown table, grouped by the parts of the combination in
    `by` (0 kind, 1 store, 2 sink, 3 fault): what docs/reliability.md shows."""
    groups: dict[str, dict[str, float]] = {}
    for c in doc["combinations"]:
        parts = c["combo"].split()
        key = " ".join(parts[i] for i in by)
        g = groups.setdefault(key, {})
        for name, value in c.items():
            if name != "combo":
                g[name] = g.get(name, 0) + value
    names = ("trials", "faults", "runs", "recovered", "lost", "duplicated", "repeats", "bad_lines", "leases_left")
    lines = [
        "| "
        + " x ".join(("kind", "store", "sink", "fault")[i] for i in by)
        + " | "
        + " | ".join(names)
        + " | s/trial |",
        "|---" * (len(names) + 2) + "|",
    ]
    for key in sorted(groups):
        g = groups[key]
        cells = [str(int(g[n])) for n in names] + [f"{g['seconds'] / g['trials']:.0f}"]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merged(paths: list[Path]) -> dict[str, Any]:
    """Several results files (parallel harness runs) as one: their combinations and trials together."""
    docs = [json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text()) for p in paths]
    return {
        "combinations": [c for d in docs for c in d["combinations"]],
        "trials": [t for d in docs for t in d["trials"]],
    }


def summary(doc: dict[str, Any]) -> str:
    """The figures docs/reliability.md quotes: trials, faults that landed by kind and keyed moment,
    rows checked, lost, twice, bad lines, exits, where the faults landed, serve's failed cycles."""
    trials = doc["trials"]
    runs = [run for t in trials for run in t["runs"]]

    def kind(run: dict[str, Any]) -> str:
        return str(run["shot"]).split(" at ")[0].split(";")[0]

    fired = Counter(kind(run) for run in runs if run["fired"])
    drawn = Counter(kind(run) for run in runs if run["shot"])
    moments = Counter((run["shot"].split(" at ")[1], run["fired"]) for run in runs if run["shot"].startswith("keyed-"))
    checked = [t for t in trials if t["verdict"]]
    once = [t["verdict"] for t in checked if t["spec"]["sink"] != "jsonl"]
    repeats = sum(t["verdict"]["duplicated"] for t in checked if t["spec"]["sink"] == "jsonl")
    bad = [(t["spec"]["index"], t["spec"]["seed"], r["problem"]) for t in trials for r in t["runs"] if r["problem"]]
    stages = Counter("in flight" if "flight" in r["stage"] else r["stage"].split(" (")[0] for r in runs if r["fired"])
    serve = [t for t in trials if t["spec"]["fault"].startswith("serve-")]
    felt = [int(m.group(1)) for t in serve if (m := re.search(r"(\d+) cycles failed", t["runs"][0]["note"]))]
    combos = len({c["combo"] for c in doc["combinations"]})
    second = [t for t in trials if t["spec"]["fault"] == "sink-writer"]
    commits = [max([0, *(int(x) for r in t["runs"] for x in re.findall(r"second writer: (\d+) commits", r["note"]))])
               for t in second]  # fmt: skip
    weave = re.compile(r"(\d+) icetail commits, (\d+) foreign, (\d+) icetail commits on top")
    woven = [tuple(int(x) for x in m.groups()) for t in second if (m := weave.search(t["runs"][-1]["note"]))]
    outraced = sum(1 for t in second for r in t["runs"] if "CommitFailedException" in r["last_line"])
    lines = [
        f"trials {len(trials)}, recovered {sum(t['ok'] for t in trials)}, combinations {combos}",
        f"runs {len(runs)}, faults that landed {sum(fired.values())} of {sum(drawn.values())} drawn: "
        f"{dict(fired.most_common())}",
        f"keyed moments (moment, landed): {dict(sorted(moments.items()))}",
        f"rows checked {sum(t['verdict']['expected'] for t in checked)}, "
        f"lost {sum(t['verdict']['lost'] for t in checked)}, "
        f"twice (exactly-once sinks) {sum(v['duplicated'] + v['foreign'] for v in once)}, jsonl repeats {repeats}, "
        f"out of order per key (bus sinks) {sum(v.get('out_of_order', 0) for v in once)}",
        f"runs without one clear line {len(bad)}: {bad}",
        f"exits {dict(Counter(r['returncode'] for r in runs).most_common())}; faults landed {dict(stages)}",
        f"serve trials {len(serve)}, cycles failed (faults felt) {sum(felt)} in {sum(1 for n in felt if n)} "
        f"trials, recovered in place {sum(t['ok'] for t in serve)}",
        f"sink-writer trials {len(second)} ({sum(t['ok'] for t in second)} recovered): second writer's commits "
        f"{sum(commits)} (in {sum(1 for n in commits if n)} trials); on the targets: "
        f"{sum(w[0] for w in woven)} icetail commits, {sum(w[1] for w in woven)} foreign, "
        f"{sum(w[2] for w in woven)} icetail commits on top of a foreign one; "
        f"runs stopped by a commit conflict (one line) {outraced}",
        f"time {sum(t['seconds'] for t in trials):.0f} s in trials",
        "findings: " + "; ".join(f"trial {t['spec']['index']} seed {t['spec']['seed']}: {t['findings']}"
                                 for t in trials if t["findings"]),
    ]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    # python -m bench.chaos.report FILE.json [FILE.json ...] [GROUPING ... | summary], GROUPING e.g. 3 or 2,3
    files = [Path(a) for a in sys.argv[1:] if a.endswith((".json", ".json.gz"))]
    groupings = [a for a in sys.argv[1:] if not a.endswith((".json", ".json.gz"))] or ["0,1,2,3"]
    doc = merged(files)
    for spec in groupings:
        if spec == "summary":
            print(summary(doc))
            continue
        print(markdown(doc, tuple(int(i) for i in spec.split(","))))
        print()
