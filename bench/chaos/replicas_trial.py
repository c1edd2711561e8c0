"""A `replicas` trial: 2-4 `icetail serve` replicas of one configuration (issue 35, docs/delivery.md
"Replicas") follow 2-4 source tables while their writers commit, and 1-3 seeded faults hit them:

* `kill`: SIGKILL of a replica's process group (driver, JVM, workers): its leases expire a TTL
  later and the others take its consumers over (when none is left, a new one is started, as its
  Deployment would);
* `cut`: the replica's own PostgreSQL proxy is cut (connections dropped, new ones refused) for
  longer than the lease TTL, then heals: the replica must stop writing before its lease can be
  taken over, and deliver again afterwards;
* `term`: a rolling step (deploy/k8s: maxSurge 1, maxUnavailable 0): a new replica is started and
  waited for until its /readyz is 200, then the old one gets SIGTERM and must exit 0;
* `join`: another replica is started.

The configuration is one YAML file (a `tables:` list, a consumer and a sink per table, `interval: 1s`,
`lease_ttl: 6s`); each replica gets the PostgreSQL checkpoint store through a proxy of its own
(`--state`, the one flag that differs), so one can be cut off alone. The sinks are the harness's
(parquet folders, PostgreSQL mirrors or histories, one per table, reached directly).

At the end every replica left must be ready (/readyz 200) and registered in the store with a
heartbeat that reached it after its last cut healed, with every consumer at its table's head and no
batch in flight; every sink is checked exactly once against its table's snapshots
(verify.py); every replica left exits 0 on SIGTERM. An audit trigger in the store's schema records,
at each write of a batch's begin, a chunk's offset, a history entry (a batch's end) and a lease
change, the consumer's lease owner then and the writing session's `application_name`
(`icetail-state:PID`): every batch and chunk write must come from the lease holder's process, the
batches of each consumer must chain (each from the previous one's end: no snapshot range delivered
by two replicas, no range skipped), and no chunk offset may go back (a chunk committed twice).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.chaos.places import Sink, Store, new_sink, new_store, pg_execute, pg_url
from bench.chaos.plan import TrialSpec
from bench.chaos.proxy import CuttableProxy
from bench.chaos.source import Writer
from bench.chaos.trial import RunRecord, TrialConfig, TrialResult
from bench.chaos.verify import Verdict, ancestry, verify
from tests.support.catalogs import new_catalog
from tests.support.crash import kill_group
from tests.support.processes import REPO_ROOT, child_env
from tests.support.serve import free_port, http_get
from tests.support.stores import PG_URL

LEASE_TTL = 6.0  # s: short, so that a take-over after a kill or a cut happens within the trial
INTERVAL = "1s"
START_TIMEOUT = 300.0  # s for the first replicas to be ready and every consumer to have delivered once
READY_TIMEOUT = 240.0  # s for a replica started by a rolling step to be ready
CATCH_UP_TIMEOUT = 240.0  # s after the writers' end and the last fault's for every consumer to catch up
STOP_TIMEOUT = 60.0  # s for a replica to exit after SIGTERM (its --shutdown-timeout is 30 s)
MAX_LIVE = 5
FAULT_KINDS = ("kill", "cut", "term", "join")
WRITER_ROUNDS = 2  # each table's writer commits its kind's operations twice (8 commits)

AUDIT_SQL = """
CREATE TABLE {s}.chaos_audit (
    id BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    tbl TEXT NOT NULL,
    consumer TEXT,
    row JSONB,
    lease_owner TEXT,
    lease_expires_at_ms BIGINT,
    writer TEXT
);
CREATE FUNCTION {s}.chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c RECORD;
BEGIN
    SELECT lease_owner, lease_expires_at_ms INTO c FROM {s}.icetail_consumers WHERE consumer = NEW.consumer;
    INSERT INTO {s}.chaos_audit (at_ms, tbl, consumer, row, lease_owner, lease_expires_at_ms, writer)
    VALUES ((extract(epoch FROM clock_timestamp()) * 1000)::BIGINT, TG_TABLE_NAME, NEW.consumer, to_jsonb(NEW),
            c.lease_owner, c.lease_expires_at_ms, current_setting('application_name'));
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_audit AFTER INSERT ON {s}.icetail_history
    FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit();
CREATE TRIGGER chaos_audit AFTER INSERT ON {s}.icetail_inflight_batches
    FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit();
CREATE TRIGGER chaos_audit AFTER UPDATE ON {s}.icetail_inflight_splits
    FOR EACH ROW EXECUTE FUNCTION {s}.chaos_audit();
CREATE TRIGGER chaos_audit AFTER UPDATE ON {s}.icetail_consumers
    FOR EACH ROW WHEN (OLD.lease_owner IS DISTINCT FROM NEW.lease_owner) EXECUTE FUNCTION {s}.chaos_audit();
"""


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    proxy: CuttableProxy
    port: int
    err: Path
    started: float
    faults: list[str] = field(default_factory=list)  # what the harness did to it
    stopped_by_harness: bool = False  # killed or sent SIGTERM on purpose
    reported: bool = False  # its own exit is a finding already
    ended: float | None = None  # when it was seen gone
    healed_ms: int = 0  # the database's clock when its last cut ended: a beat must reach the store after it

    def gone(self) -> None:
        if self.ended is None:
            self.ended = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        reply = http_get(f"http://127.0.0.1:{self.port}/readyz", timeout=2.0)
        return reply is not None and reply[0] == 200


@dataclass(frozen=True)
class Followed:
    ident: str
    consumer: str
    writer: Writer
    sink: Sink


class ReplicasTrialRunner:
    def __init__(self, spec: TrialSpec, config: TrialConfig, work: Path) -> None:
        self.spec = spec
        self.config = config
        self.work = work
        self.rng = random.Random(spec.seed)
        self.source = new_catalog(work / "source", "chaossrc")
        self.store: Store = new_store("postgresql", work, None)
        ntables = self.rng.randint(2, 4)
        self.tables = [
            Followed(
                f"ns.events{i}",
                f"chaos{i}",
                Writer(
                    self.source,
                    spec.kind,
                    random.Random(spec.seed + 1 + i),
                    config.rows,
                    config.writer_gap,
                    ident=f"ns.events{i}",
                    rounds=WRITER_ROUNDS,
                ),
                new_sink(spec.sink, work / f"t{i}", None),
            )
            for i in range(ntables)
        ]
        self.replicas: list[Replica] = []
        self.findings: list[str] = []
        self.notes: list[str] = []
        self.env: dict[str, str] = {}
        self.config_path = work / "icetail.yaml"

    # -- set-up ---------------------------------------------------------------------------------

    def write_config(self) -> None:
        entries = []
        for t in self.tables:
            entry: dict[str, Any] = {"table": t.ident, "consumer": t.consumer, "sink": t.sink.url}
            if t.sink.keyed:
                entry["identifier_columns"] = ["id"]
            entries.append(entry)
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "catalog": self.source.name,
                    "interval": INTERVAL,
                    "lease_ttl": f"{LEASE_TTL:g}s",
                    "max_snapshots_per_batch": 1,
                    "chunk_rows": self.config.chunk_rows,
                    "metrics_host": "127.0.0.1",
                    "tables": entries,
                },
                sort_keys=False,
            )
        )

    def install_audit(self) -> None:
        """The store's tables made (migrated) by the harness, then the audit trigger in its schema."""
        from icetail.state.store import open_store

        with open_store(self.store.direct_url):
            pass
        pg_execute(AUDIT_SQL.format(s=f'"{self.store.schema}"'))

    def start_replica(self) -> Replica:
        name = f"r{len(self.replicas)}"
        host, pg_port = PG_URL.split("@", 1)[1].split("/", 1)[0].split(":")
        proxy = CuttableProxy((host, int(pg_port)))
        port = free_port()
        state = f"{pg_url(proxy.port)}?schema={self.store.schema}"
        argv = [
            sys.executable, "-m", "icetail", "serve", "--config", str(self.config_path), "--state", state,
            "--metrics-port", str(port),
        ]  # fmt: skip
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        err = logs / f"{name}.err"
        env = {**self.env, "SPARK_LOCAL_DIRS": str((self.work / "spark" / name).resolve())}
        (self.work / "spark" / name).mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.out", "wb") as out, open(err, "wb") as errf:
            proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=errf, start_new_session=True)
        replica = Replica(name, proc, proxy, port, err, time.monotonic())
        self.replicas.append(replica)
        return replica

    # -- the trial ------------------------------------------------------------------------------

    def run(self) -> TrialResult:
        started = time.monotonic()
        verdict: Verdict | None = None
        caught_up = False
        try:
            for t in self.tables:
                t.writer.create()
            self.write_config()
            self.install_audit()
            self.env = child_env([self.source], None)
            for _ in range(self.spec.replicas):
                self.start_replica()
            if not self._wait(self._all_started, START_TIMEOUT):
                self.findings.append(f"the replicas were not ready within {START_TIMEOUT:.0f}s: {self._positions()}")
            else:
                kinds = [self.rng.choice(FAULT_KINDS) for _ in range(self.rng.randint(1, 3))]
                moments = sorted(self.rng.uniform(0.3, self.config.horizon * 2) for _ in kinds)
                for t in self.tables:
                    t.writer.start()
                t0 = time.monotonic()
                for kind, moment in zip(kinds, moments, strict=True):
                    while time.monotonic() - t0 < moment:
                        time.sleep(0.05)
                    self.fire(kind)
                for t in self.tables:
                    t.writer.join()
                    self.findings.extend(f"writer {t.ident}: {e}" for e in t.writer.errors)
                self._unexpected_exits()
                caught_up = self._wait(self._recovered, CATCH_UP_TIMEOUT)
                if not caught_up:
                    self.findings.append(f"not caught up within {CATCH_UP_TIMEOUT:.0f}s: {self._positions()}")
                self._unexpected_exits()
                self.stop_all()
                verdict = self.check()
                self.audit()
            return TrialResult(
                self.spec,
                tuple(self.records()),
                verdict,
                caught_up,
                time.monotonic() - started,
                tuple(self.findings),
            )
        finally:
            self.close()

    def fire(self, kind: str) -> None:
        live = [r for r in self.replicas if r.alive]
        if kind == "join" or not live:
            if len(live) >= MAX_LIVE:
                self.notes.append(f"join skipped: {len(live)} replicas live")
                return
            fresh = self.start_replica()
            fresh.faults.append("join")
            self.notes.append(f"join: {fresh.name} started ({len(live) + 1} live)")
            return
        holders = self._holders()
        untouched = [r for r in live if not r.faults] or live
        holding = [r for r in untouched if holders.get(r.proc.pid)]
        victim = self.rng.choice(holding or untouched)
        held = len(holders.get(victim.proc.pid, []))
        if kind == "kill":
            victim.stopped_by_harness = True
            kill_group(victim.proc)
            victim.gone()
            victim.faults.append(f"kill (held {held})")
            note = f"kill: {victim.name} (held {held})"
            if len(live) == 1:
                fresh = self.start_replica()
                fresh.faults.append("restart")
                note += f"; none left: {fresh.name} started"
            self.notes.append(note)
        elif kind == "cut":
            down = self.rng.uniform(LEASE_TTL + 1.0, 2 * LEASE_TTL)
            dropped = victim.proxy.cut(down)
            victim.faults.append(f"cut {down:.1f}s (held {held})")
            note = f"cut: {victim.name} from PostgreSQL for {down:.1f}s ({dropped} connections, held {held})"
            self.notes.append(note)
            victim.proxy.wait_up()
            victim.healed_ms = self._db_ms()
        elif kind == "term":
            fresh = self.start_replica()
            fresh.faults.append(f"rolling step for {victim.name}")
            t = time.monotonic()
            if not self._wait(lambda: fresh.ready() or not fresh.alive, READY_TIMEOUT) or not fresh.alive:
                self.findings.append(f"rolling step: {fresh.name} not ready within {READY_TIMEOUT:.0f}s")
            ready_after = time.monotonic() - t
            victim.stopped_by_harness = True
            victim.proc.send_signal(signal.SIGTERM)
            try:
                code = victim.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
                self.findings.append(f"rolling step: {victim.name} ignored SIGTERM for {STOP_TIMEOUT:.0f}s")
                kill_group(victim.proc)
            victim.gone()
            if code not in (None, 0):
                self.findings.append(f"rolling step: {victim.name} exited {code} on SIGTERM")
            victim.faults.append(f"term (held {held}, exit {code})")
            self.notes.append(
                f"term: {fresh.name} ready after {ready_after:.0f}s, then {victim.name} (held {held}) exit {code}"
            )

    def stop_all(self) -> None:
        """SIGTERM to every replica left, at once, as a Deployment scaled to zero: each must exit 0."""
        left = [r for r in self.replicas if r.alive]
        for r in left:
            r.stopped_by_harness = True
            r.proc.send_signal(signal.SIGTERM)
        for r in left:
            try:
                code = r.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.findings.append(f"{r.name} ignored SIGTERM for {STOP_TIMEOUT:.0f}s")
                continue
            r.gone()
            if code != 0:
                self.findings.append(f"{r.name} exited {code} on SIGTERM")

    def close(self) -> None:
        for r in self.replicas:
            kill_group(r.proc)
            r.proxy.close()
        for t in self.tables:
            t.writer.join()
            t.sink.drop()
        self.store.drop()

    # -- what the store says --------------------------------------------------------------------

    def _checkpoints(self) -> dict[str, Any]:
        from icetail.state.store import open_store

        with open_store(self.store.direct_url) as store:
            return {t.consumer: store.load(t.consumer) for t in self.tables}

    def _holders(self) -> dict[int, list[str]]:
        """Consumers by the pid of their live lease's holder."""
        out: dict[int, list[str]] = defaultdict(list)
        try:
            checkpoints = self._checkpoints()
        except Exception:  # noqa: BLE001 - the store unreachable for a moment: no preference
            return out
        for consumer, cp in checkpoints.items():
            if cp is not None and cp.lease is not None and cp.lease.expires_at_ms > cp.as_of_ms:
                out[int(cp.lease.owner.split(":")[1])].append(consumer)
        return out

    def _positions(self) -> str:
        try:
            cps = self._checkpoints()
        except Exception as exc:  # noqa: BLE001
            return f"store: {exc}"
        parts = []
        for t in self.tables:
            cp = cps[t.consumer]
            head = self.source.load(t.ident).metadata.current_snapshot_id
            if cp is None:
                parts.append(f"{t.consumer}: none")
                continue
            owner = cp.lease.owner if cp.lease else None
            parts.append(
                f"{t.consumer}: cursor {cp.cursor.snapshot_id} head {head} inflight {cp.inflight is not None} "
                f"owner {owner}"
            )
        ready = {r.name: (r.alive, r.ready() if r.alive else None) for r in self.replicas}
        return f"{'; '.join(parts)}; replicas (alive, ready): {ready}"

    def _all_started(self) -> bool:
        live = [r for r in self.replicas if r.alive]
        if len(live) < len(self.replicas):
            return True  # one died: reported by _unexpected_exits
        cps = self._checkpoints()
        return all(cps[t.consumer] is not None and cps[t.consumer].cursor.snapshot_id for t in self.tables) and all(
            r.ready() for r in live
        )

    def _recovered(self) -> bool:
        live = [r for r in self.replicas if r.alive]
        if not live:
            return False
        cps = self._checkpoints()
        for t in self.tables:
            cp = cps[t.consumer]
            head = self.source.load(t.ident).metadata.current_snapshot_id
            if cp is None or cp.cursor.snapshot_id != head or cp.inflight is not None:
                return False
        if not all(r.ready() for r in live):
            return False
        beats = dict(
            pg_execute(f'SELECT pid, MAX(heartbeat_at_ms) FROM "{self.store.schema}".icetail_replicas GROUP BY pid')
        )
        return all(beats.get(r.proc.pid, -1) > r.healed_ms for r in live)  # each registered, beating since a cut

    def _db_ms(self) -> int:
        return int(pg_execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT")[0][0])

    def _wait(self, probe: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if probe():
                    return True
            except Exception:  # noqa: BLE001 - the store not made yet, a catalog busy: look again
                pass
            time.sleep(0.5)
        return False

    def _unexpected_exits(self) -> None:
        for r in self.replicas:
            if not r.alive and not r.stopped_by_harness and not r.reported:
                r.reported = True
                r.gone()
                tail = [x for x in r.err.read_text(errors="replace").splitlines() if x.strip()][-2:]
                self.findings.append(f"{r.name} exited {r.proc.returncode} on its own: {tail}")

    # -- the checks -----------------------------------------------------------------------------

    def check(self) -> Verdict | None:
        """Each table's sink against its snapshots (verify.py), summed."""
        cps = self._checkpoints()
        verdicts = []
        for t in self.tables:
            cp = cps[t.consumer]
            if cp is None or cp.cursor.snapshot_id is None:
                self.findings.append(f"{t.consumer}: nothing delivered")
                continue
            v = verify(t.sink, self.source.load(t.ident), cp.cursor.snapshot_id)
            verdicts.append(v)
            if not v.ok(exactly_once=True):
                self.findings.append(f"{t.consumer} ({t.sink.kind}): {v}")
        if not verdicts:
            return None
        return Verdict(
            expected=sum(v.expected for v in verdicts),
            delivered=sum(v.delivered for v in verdicts),
            lost=sum(v.lost for v in verdicts),
            duplicated=sum(v.duplicated for v in verdicts),
            foreign=sum(v.foreign for v in verdicts),
            torn_lines=sum(v.torn_lines for v in verdicts),
            examples=tuple(e for v in verdicts for e in v.examples)[:6],
            out_of_order=sum(v.out_of_order for v in verdicts),
        )

    def audit(self) -> None:
        """The audit trigger's rows: every write from the lease holder's process, each consumer's batches
        chained (no snapshot range delivered twice, by one replica or two), no chunk offset going back."""
        rows = pg_execute(
            f"SELECT id, at_ms, tbl, consumer, row, lease_owner, lease_expires_at_ms, writer "
            f'FROM "{self.store.schema}".chaos_audit ORDER BY id'
        )
        foreign_writes, expired_writes, handovers = [], 0, Counter()
        history: dict[str, list[tuple[int, int | None, int, str]]] = defaultdict(list)
        offsets: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for _id, at_ms, tbl, consumer, row, owner, expires, writer in rows:
            row = row if isinstance(row, dict) else json.loads(row)
            if tbl == "icetail_consumers":
                if owner is not None:
                    handovers[consumer] += 1
                continue
            writer_pid = writer.removeprefix("icetail-state:") if writer else ""
            owner_pid = owner.split(":")[1] if owner else None
            if owner_pid != writer_pid:
                foreign_writes.append(f"{tbl} of {consumer} by {writer!r}, lease {owner!r}")
            if expires is not None and expires <= at_ms:
                expired_writes += 1
            if tbl == "icetail_history":
                history[consumer].append(
                    (int(row["seq"]), row["from_snapshot_exclusive"], int(row["to_snapshot_inclusive"]), owner or "")
                )
            elif tbl == "icetail_inflight_splits" and row.get("next_row_exclusive") is not None:
                offsets[(consumer, row["batch_id"], row["split_id"])].append(int(row["next_row_exclusive"]))
        if foreign_writes:
            self.findings.append(f"audit: {len(foreign_writes)} writes not by the lease holder: {foreign_writes[:3]}")
        overlaps, owners = [], {}
        for t in self.tables:
            entries = sorted(history.get(t.consumer, []))
            owners[t.consumer] = len({e[3] for e in entries})
            table = self.source.load(t.ident)
            head = table.metadata.current_snapshot_id
            order = {snap: i for i, (snap, _) in enumerate(ancestry(table, head))} if head else {}
            spans: list[tuple[int, int, str]] = []
            previous_to: int | None = None
            for n, (seq, frm, to, owner) in enumerate(entries):
                if n and frm != previous_to:
                    overlaps.append(f"{t.consumer} seq {seq}: from {frm}, the batch before ended at {previous_to}")
                previous_to = to
                lo = order.get(frm, -1) if frm is not None else -1
                spans.append((lo, order.get(to, -2), owner))
            for i, (lo, hi, owner) in enumerate(spans):
                for lo2, hi2, owner2 in spans[i + 1 :]:
                    if max(lo, lo2) < min(hi, hi2):
                        overlaps.append(f"{t.consumer}: ({lo}, {hi}] by {owner} and ({lo2}, {hi2}] by {owner2}")
        if overlaps:
            self.findings.append(f"audit: snapshot ranges delivered twice or skipped: {overlaps[:3]}")
        back = [f"{k}: {v}" for k, v in offsets.items() if any(b <= a for a, b in zip(v, v[1:], strict=False))]
        if back:
            self.findings.append(f"audit: chunk offsets going back (a chunk committed twice): {back[:3]}")
        batches = sum(len(v) for v in history.values())
        self.notes.append(
            f"audit: {len(rows)} writes, {batches} batches, {sum(len(v) for v in offsets.values())} chunk commits, "
            f"lease changes {sum(handovers.values())}, owners per consumer {sorted(owners.values())}, "
            f"{expired_writes} writes past the lease's expiry by its holder"
        )

    def records(self) -> list[RunRecord]:
        out = []
        for i, r in enumerate(self.replicas):
            text = r.err.read_text(errors="replace") if r.err.exists() else ""
            lines = [x for x in text.splitlines() if x.strip()]
            problem = ""
            if "Traceback (most recent call last)" in text:
                problem = "traceback"
            elif "Exception in thread" in text or any(x.startswith("\tat ") for x in lines):
                problem = "java stack trace"
            failed = text.count('"cycle failed"')
            out.append(
                RunRecord(
                    index=i,
                    shot="; ".join(r.faults),
                    fired=any(not f.startswith(("restart", "rolling step")) for f in r.faults),
                    note=f"{r.name}: {failed} cycles failed" + (f"; {'; '.join(self.notes)}" if i == 0 else ""),
                    returncode=r.proc.returncode if r.proc.returncode is not None else 0,
                    seconds=(r.ended or time.monotonic()) - r.started,
                    last_line=lines[-1] if lines else "",
                    tail=tuple(lines[-4:]),
                    problem=problem,
                    lease_left=False,
                )
            )
        return out
