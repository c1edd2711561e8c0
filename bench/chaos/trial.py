"""One trial: a source table with a writer committing to it, `icetail run` restarted under a fault
until it has caught up, then the sink checked against the source's snapshots."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.table import Table

from bench.chaos.disk import SmallDisk
from bench.chaos.faults import FaultShot, Targets, draw, fire
from bench.chaos.java_source import JavaWriter, java_service
from bench.chaos.moments import MomentWatch, draw_moment, run_args
from bench.chaos.places import Sink, Store, new_sink, new_store
from bench.chaos.plan import JAVA_KINDS, KEYED_FAULTS, TrialSpec
from bench.chaos.proxy import CuttableProxy
from bench.chaos.s3 import moto
from bench.chaos.sink_writer import SinkWriter, loader
from bench.chaos.source import IDENT, Writer
from bench.chaos.verify import Verdict, ancestry, sink_changes, verify, verify_reset
from tests.support.catalogs import LocalCatalog, new_catalog
from tests.support.crash import kill_group
from tests.support.processes import REPO_ROOT, child_env, icetail_lines
from tests.support.stores import PG_URL, expire_dead_lease, view_state

CONSUMER = "chaos"
RUN_TIMEOUT = 240.0


@dataclass(frozen=True)
class TrialConfig:
    rows: int = 1500  # rows of the first append; later appends add a quarter to a half of it
    chunk_rows: int = 200
    max_faults: int = 2  # faulted runs per trial: 1..max_faults
    horizon: float = 12.0  # latest fault moment, s after a run starts (about one run's length)
    writer_gap: tuple[float, float] = (1.0, 4.0)  # s between the writer's commits
    max_runs: int = 8


@dataclass(frozen=True)
class SinkReset:
    old: Sink
    cursor: int  # the cursor when the consumer was moved: the old sink's part ends there
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Rewind:
    """`icetail reset --to` after a run that caught up: the snapshots after `to` up to `cursor` are
    delivered again, on purpose (docs/delivery.md: reset --to moves the cursor like a Kafka offset reset)."""

    cursor: int  # where the consumer stood
    to: str  # the position given: snapshot:ID or earliest
    replayed: frozenset[int]  # the snapshots delivered a second time


@dataclass(frozen=True)
class RunRecord:
    index: int
    shot: str  # the fault planned for this run ('' for a run left to finish)
    fired: bool
    note: str
    returncode: int
    seconds: float
    last_line: str
    tail: tuple[str, ...]  # the last lines of stderr, for the record
    problem: str  # why this run's exit is a finding ('' when it is not)
    lease_left: bool  # the run stopped and left its lease held (a restart waits for the TTL)
    stage: str = ""  # where the consumer was when the run ended (a fault mid-batch: "in flight ...")


@dataclass(frozen=True)
class TrialResult:
    spec: TrialSpec
    runs: tuple[RunRecord, ...]
    verdict: Verdict | None
    caught_up: bool
    seconds: float
    findings: tuple[str, ...] = field(default=())

    @property
    def faults(self) -> int:
        return sum(1 for r in self.runs if r.fired)

    @property
    def bad_lines(self) -> int:
        return sum(1 for r in self.runs if r.problem)

    @property
    def ok(self) -> bool:
        return (
            self.caught_up
            and self.verdict is not None
            and self.verdict.ok(exactly_once=self.spec.sink != "jsonl")
            and not self.findings
        )


def exit_problem(shot: FaultShot | None, fired: bool, returncode: int, lines: list[str]) -> str:
    """Is the way this run ended a finding? A run stopped by a fault must say so in one line."""
    text = "\n".join(lines)
    if "Traceback (most recent call last)" in text:
        return "traceback"
    if "Exception in thread" in text or any(line.startswith("\tat ") for line in lines):
        return "java stack trace"
    if returncode == 0:
        return ""
    if shot is not None and (shot.kind in ("sigkill", "reset-sink", "keyed-kill") or shot.kill) and fired:
        return ""  # nothing can print under SIGKILL
    if returncode < 0 and any(line.startswith(f"consumer {CONSUMER}: state ") for line in lines):
        return ""  # the signal came after the run's closing lines (its work done), while Python exited
    if returncode < 0:
        return f"silent: died of signal {-returncode} without a line"
    if not lines:
        return f"exit {returncode} without a line"
    errors = [i for i, line in enumerate(lines) if line.startswith("icetail: ")]
    if not errors:
        return f"exit {returncode}, last line not icetail's: {lines[-1][:80]!r}"
    if errors[0] != len(lines) - 1:
        return f"{len(lines) - errors[0]} lines from the error on, not one"
    return ""


def interleaving(table: Table | None) -> str:
    """How icetail's and a second writer's commits interleave on the target's main branch."""
    if table is None or table.current_snapshot() is None:
        return "no target"
    mine = other = on_other = 0
    snap = table.current_snapshot()
    chain = []
    while snap is not None:
        chain.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    props = {s.snapshot_id: s.summary.additional_properties if s.summary else {} for s in chain}
    foreign = {snap for snap, p in props.items() if "icetail.consumer" not in p}
    for s in chain:
        if s.snapshot_id in foreign:
            other += 1
        else:
            mine += 1
            on_other += s.parent_snapshot_id in foreign
    return f"{mine} icetail commits, {other} foreign, {on_other} icetail commits on top of a foreign one"


class TrialRunner:
    def __init__(self, spec: TrialSpec, config: TrialConfig, work: Path) -> None:
        self.spec = spec
        self.config = config
        self.work = work
        self.rng = random.Random(spec.seed)
        self.proxy: CuttableProxy | None = None
        if spec.uses_postgresql:
            host, pg_port = PG_URL.split("@", 1)[1].split("/", 1)[0].split(":")
            self.proxy = CuttableProxy((host, int(pg_port)))
        port = self.proxy.port if self.proxy else None
        self.s3proxy: CuttableProxy | None = None
        server = None
        if spec.uses_s3:
            server = moto(work.parent / "moto")
            self.s3proxy = CuttableProxy(("127.0.0.1", server.port))
        disk = None
        if spec.base_fault == "disk-full-sink":
            disk = SmallDisk(work / ("sinkcatalog" if spec.sink in ("iceberg", "icemirror", "icehistory") else "sink"))
        elif spec.base_fault == "disk-full-state":
            disk = SmallDisk(work / "state")
        self.store: Store = new_store(spec.store, work, port)
        self.sink: Sink = new_sink(spec.sink, work, port, server, self.s3proxy.port if self.s3proxy else None)
        self.writer: Writer | JavaWriter
        if spec.kind in JAVA_KINDS:
            # Java creates the catalog (JdbcCatalog's layout first); a name per trial: the JVM is shared
            self.source = LocalCatalog(f"chaosj{spec.index}x{spec.seed % 10**6}", (work / "source").resolve())
            service = java_service(work.parent / "java")
            wrng = random.Random(spec.seed + 1)
            self.writer = JavaWriter(self.source, spec.kind, wrng, config.rows, config.writer_gap, service)
        else:
            self.source = new_catalog(work / "source", "chaossrc")
            self.writer = Writer(self.source, spec.kind, random.Random(spec.seed + 1), config.rows, config.writer_gap)
        self.findings: list[str] = []
        self.reset: SinkReset | None = None  # reset-sink: the old sink and where the cursor stood
        self.rewind: Rewind | None = None  # reset-to: what is delivered twice on purpose
        self.verify_mode = "strict" if spec.fault == "verify-strict" else ""
        self.refusals = 0  # verify-strict: runs refused
        if spec.fault == "verify-strict" and isinstance(self.writer, Writer):
            self.writer.liar = True
        self.watch: MomentWatch | None = None
        if spec.fault in KEYED_FAULTS:
            moment = draw_moment(spec.kind, spec.sink, self.rng)
            self.watch = MomentWatch(moment, work / "hold" / "hold", self.sink, self.store.direct_url, CONSUMER)
        self.sink_writer: SinkWriter | None = None
        if spec.fault == "sink-writer":
            self.sink_writer = SinkWriter(loader(self.sink.iceberg_target), random.Random(spec.seed + 2))
        self._appends: frozenset[int] | None = None
        self._last_look = 0.0
        self.targets = Targets(self.proxy, self.s3proxy, self.source.root / "catalog.db", disk)

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "icetail", "run",
            "--catalog", self.source.name,
            "--table", IDENT,
            "--state", self.store.url,
            "--sink", self.sink.url,
            "--consumer", CONSUMER,
            "--until-caught-up",
            "--max-snapshots-per-batch", "1",
            "--chunk-rows", str(self.config.chunk_rows),
            *(["--verify", self.verify_mode] if self.verify_mode else []),
            *(run_args(self.watch.moment) if self.watch else []),
            *self.sink.extra_args,
            *(self.writer.icetail_args if isinstance(self.writer, JavaWriter) else []),
        ]  # fmt: skip

    def run(self) -> TrialResult:
        started = time.monotonic()
        try:
            self.writer.create()
            env = child_env([self.source], self.work / "spark", extra=self.sink.env())
            planned = self.rng.randint(1, self.config.max_faults)
            self.writer.start()
            runs: list[RunRecord] = []
            for index in range(self.config.max_runs):
                shot = self.shot_for(index, planned)
                if shot is None:
                    self.writer.join()  # the run left to finish starts after the last commit
                record = self.run_once(index, shot, env)
                if shot is not None and shot.kind == "reset-sink" and self.reset is None:
                    env = self.reset_sink(env)
                if shot is not None and shot.kind == "reset-to" and record.returncode == 0 and self.rewind is None:
                    record = self.reset_to(record, env)
                if self.verify_mode == "strict" and record.returncode != 0:
                    record = self.refused(record)
                runs.append(record)
                if shot is None and record.returncode == 0:
                    break
                if shot is None or not record.fired:
                    if record.returncode != 0 and not (record.fired and record.shot == "verify-strict"):
                        self.findings.append(f"run {index} failed without a fault: {record.last_line}")
            else:
                self.findings.append(f"not caught up after {self.config.max_runs} runs")
            if self.spec.fault == "verify-strict" and not self.refusals:
                self.findings.append(f"the lying summary of snapshot {self.lie} was never refused by --verify strict")
            if self.spec.fault == "reset-to" and self.rewind is None:
                self.findings.append("reset --to never happened (no run caught up before the writer's end)")
            self.writer.join()
            self.findings.extend(f"writer: {e}" for e in self.writer.errors)
            verdict, caught_up = self.check()
            if self.sink_writer is not None and runs:
                note = f"{runs[-1].note}; target: {interleaving(self.sink.iceberg_target())}".lstrip("; ")
                runs[-1] = dataclasses.replace(runs[-1], note=note)
            return TrialResult(
                self.spec, tuple(runs), verdict, caught_up, time.monotonic() - started, tuple(self.findings)
            )
        finally:
            self.close()

    def close(self) -> None:
        """Whatever the trial set up, taken down (its work folder stays for the caller to keep or drop)."""
        for proxy in (self.proxy, self.s3proxy):
            if proxy is not None:
                proxy.close()
        for locker in self.targets.lockers:
            locker.kill()
        if self.sink_writer is not None:
            self.sink_writer.stop()
        if self.targets.disk is not None:
            self.targets.disk.unmount()
        self.store.drop()
        self.sink.drop()
        if self.reset is not None:
            self.reset.old.drop()
        if isinstance(self.writer, JavaWriter):
            with contextlib.suppress(Exception):  # the Java process gone: reported by the writer
                self.writer.close()

    @property
    def lie(self) -> int | None:
        return self.writer.lie if isinstance(self.writer, Writer) else None

    def shot_for(self, index: int, planned: int) -> FaultShot | None:
        """The fault of run `index`: the trial's for the first `planned` runs; after a `reset --to`
        the replaying run gets a SIGKILL at a random moment; a `verify-strict` trial runs strict
        (an unhurt run) until the lie is refused."""
        if self.spec.fault == "verify-strict":
            return FaultShot("verify-strict", 0.0) if index < planned and not self.refusals else None
        if index >= planned:
            return None
        if self.spec.fault == "reset-to" and self.rewind is not None:
            return draw("sigkill", self.rng, self.config.horizon)
        shot = draw(self.spec.fault, self.rng, self.config.horizon)
        if self.watch is not None:
            shot = dataclasses.replace(shot, moment=self.watch.moment)
        return shot

    def run_once(self, index: int, shot: FaultShot | None, env: dict[str, str]) -> RunRecord:
        self.targets.settle()
        watch = self.watch if shot is not None and shot.kind in KEYED_FAULTS else None
        if watch is not None:
            watch.arm()
            env = {**env, **watch.env()}
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        err_path = logs / f"run{index:02d}.err"
        with open(logs / f"run{index:02d}.out", "wb") as out, open(err_path, "wb") as err:
            started = time.monotonic()
            proc = subprocess.Popen(
                self.command(), env=env, cwd=REPO_ROOT, stdout=out, stderr=err, start_new_session=True
            )
            fired, note = False, ""
            second = self.sink_writer if shot is not None and shot.kind == "sink-writer" else None
            if second is not None:
                second.start()
            try:
                while proc.poll() is None:
                    elapsed = time.monotonic() - started
                    if shot is not None and not fired and elapsed >= shot.delay and self._ready_for(shot):
                        fired, note = True, fire(shot, proc, self.targets)
                        if watch is not None:
                            note += f" (holds let go first: {watch.let_go})" if watch.let_go else ""
                            watch.disarm()
                    if elapsed > RUN_TIMEOUT:
                        kill_group(proc)
                        note += f"; hung: killed after {RUN_TIMEOUT:.0f}s"
                        self.findings.append(f"run {index} ({shot}) hung past {RUN_TIMEOUT:.0f}s")
                        break
                    time.sleep(0.02)
            finally:
                kill_group(proc)  # whatever of it lingers (a JVM) goes with it
                if watch is not None:
                    watch.disarm()
                if second is not None:
                    second.stop()
                    note += f"; second writer: {second.commits} commits so far"
            seconds = time.monotonic() - started
        lines = [line for line in icetail_lines(err_path.read_text(errors="replace")) if line.strip()]
        returncode = proc.returncode
        # not released by the harness: the next run must take over a dead holder's lease itself
        lease_left = returncode != 0 and self._lease_owner() is not None
        try:
            stage = view_state(self.store.direct_url, CONSUMER).stage
        except Exception:  # noqa: BLE001 - no store yet
            stage = "no store yet"
        return RunRecord(
            index=index,
            shot=str(shot) if shot else "",
            fired=fired,
            note=note,
            returncode=returncode,
            seconds=seconds,
            last_line=lines[-1] if lines else "",
            tail=tuple(lines[-4:]),
            problem=exit_problem(shot, fired, returncode, lines),
            lease_left=lease_left,
            stage=stage,
        )

    def _ready_for(self, shot: FaultShot) -> bool:
        """reset-sink waits until the consumer has a cursor (something to move), checked twice a second;
        a keyed fault for its moment; reset-to and verify-strict fire nothing during a run; a kill
        beside a second writer waits for that writer's first commit (icetail made the target)."""
        if shot.kind in ("reset-to", "verify-strict"):
            return False
        if shot.kind == "sink-writer":
            return self.sink_writer is not None and self.sink_writer.commits > 0
        if shot.kind in KEYED_FAULTS:
            assert self.watch is not None
            return self.watch.come(self.appends)
        if shot.kind != "reset-sink":
            return True
        now = time.monotonic()
        if now - self._last_look < 0.5:
            return False
        self._last_look = now
        try:
            return view_state(self.store.direct_url, CONSUMER).cursor is not None
        except Exception:  # noqa: BLE001 - no store yet
            return False

    def appends(self) -> frozenset[int]:
        """The source's append snapshots (read when a hold is seen; new ones only come from the writer)."""
        table = self.source.load(IDENT)
        return frozenset(
            s.snapshot_id for s in table.metadata.snapshots if s.summary and s.summary.operation.value == "append"
        )

    def reset_to(self, record: RunRecord, env: dict[str, str]) -> RunRecord:
        """`icetail reset --to` an earlier snapshot of the cursor's ancestry (or `earliest`) after a run
        that caught up; the check then wants the snapshots after it delivered twice (once per pass),
        except by the mirror, which replays idempotently."""
        state = view_state(self.store.direct_url, CONSUMER)
        if state.cursor is None or state.inflight_batch is not None:
            return record
        chain = [snap for snap, _ in ancestry(self.source.load(IDENT), state.cursor)]
        pick = self.rng.randrange(len(chain))  # chain[pick - 1] exclusive; 0: earliest
        to = f"snapshot:{chain[pick - 1]}" if pick else "earliest"
        base = [sys.executable, "-m", "icetail", "reset", "--state", self.store.url, "--consumer", CONSUMER]
        done = subprocess.run([*base, "--to", to], env=env, capture_output=True, text=True)
        lines = [x for x in icetail_lines(done.stderr + done.stdout) if x.strip()]
        if done.returncode != 0:
            self.findings.append(f"reset --to {to} failed (exit {done.returncode}): {lines[-3:]}")
            return record
        after = view_state(self.store.direct_url, CONSUMER)
        expected_cursor = chain[pick - 1] if pick else None
        if after.cursor != expected_cursor or after.inflight_batch is not None:
            self.findings.append(f"reset --to {to}: the cursor is {after.cursor}, not {expected_cursor}")
        self.rewind = Rewind(state.cursor, to, frozenset(chain[pick:]))
        note = f"caught up at {state.cursor}, then reset --to {to}: {len(chain) - pick} snapshots to replay"
        return dataclasses.replace(record, fired=True, note=note)

    def refused(self, record: RunRecord) -> RunRecord:
        """A run under `--verify strict` stopped: it must be the lie's refusal (exit 2, one line naming
        the snapshot), the cursor before the lie, nothing of the lie in the sink. Then the run goes on
        as the docs say, with `--verify warn` (the table looked at), delivering the rest exactly once."""
        lie = self.lie
        if lie is None or record.returncode != 2 or "summary rule" not in record.last_line:
            return record  # another failure: the loop reports it
        self.refusals += 1
        problems = []
        if str(lie) not in record.last_line:
            problems.append(f"the refusal does not name snapshot {lie}")
        state = view_state(self.store.direct_url, CONSUMER)
        table = self.source.load(IDENT)
        before = {snap for snap, _ in ancestry(table, lie)} - {lie}
        if state.cursor is not None and state.cursor not in before:
            problems.append(f"the cursor {state.cursor} is not before the refused snapshot {lie}")
        if not self.sink.keyed:
            columns = [f.name for f in table.schema().fields]
            held = sum(n for (_c, snap, _r), n in sink_changes(self.sink, columns)[0].items() if snap == lie)
            if held:
                problems.append(f"{held} changes of the refused snapshot {lie} are in the sink")
        self.findings.extend(f"verify-strict: {p}" for p in problems)
        self.verify_mode = "warn"
        note = f"refused snapshot {lie} (cursor {state.cursor}, {state.stage}); next runs --verify warn"
        return dataclasses.replace(record, fired=True, note=note, shot="verify-strict")

    def reset_sink(self, env: dict[str, str]) -> dict[str, str]:
        """`icetail reset --sink` to a second sink after the killed run: refused while a batch is in
        flight (one line, exit 1), then with `--to snapshot:CURSOR` (the batch abandoned); the old
        sink keeps what it had, the new one gets everything after the cursor."""
        self.targets.settle()
        try:
            state = view_state(self.store.direct_url, CONSUMER)
        except Exception:  # noqa: BLE001 - no store yet: nothing to move
            return env
        if not state.exists or state.cursor is None:
            return env
        second = new_sink(self.spec.sink, self.work / "second", None)
        base = [sys.executable, "-m", "icetail", "reset", "--state", self.store.url, "--consumer", CONSUMER]
        notes = []
        for attempt in range(2):
            extra = ["--to", f"snapshot:{state.cursor}"] if state.inflight_batch or attempt else []
            if state.inflight_batch and attempt == 0:  # first without --to: must be refused, in one line
                done = subprocess.run([*base, "--sink", second.url], env=env, capture_output=True, text=True)
                lines = [x for x in icetail_lines(done.stderr) if x.strip()]
                notes.append(f"reset --sink refused (exit {done.returncode}): {lines[-1] if lines else ''}")
                if done.returncode == 0 or len(lines) != 1:  # exit 1: transient (a run may finish the batch)
                    self.findings.append(f"reset --sink with a batch in flight: exit {done.returncode}, {lines}")
            done = subprocess.run([*base, "--sink", second.url, *extra], env=env, capture_output=True, text=True)
            if done.returncode == 0:
                break
            owner = expire_dead_lease(self.store.direct_url, CONSUMER)  # what the TTL would do
            notes.append(f"reset refused ({done.stderr.strip()[-120:]}); lease of {owner} expired")
        else:
            self.findings.append(f"reset --sink failed: {done.stderr.strip()[-300:]}")
            return env
        self.reset = SinkReset(self.sink, state.cursor, tuple(notes))
        self.sink = second
        return {**env, **second.env()}

    def _lease_owner(self) -> str | None:
        try:
            return view_state(self.store.direct_url, CONSUMER).lease_owner
        except Exception:  # noqa: BLE001 - no store yet
            return None

    def check(self) -> tuple[Verdict | None, bool]:
        table = self.source.load(IDENT)
        try:
            state = view_state(self.store.direct_url, CONSUMER)
        except Exception as exc:  # noqa: BLE001 - no store at all: nothing was delivered
            self.findings.append(f"state unreadable: {exc}")
            return None, False
        caught_up = state.cursor == table.metadata.current_snapshot_id and state.inflight_batch is None
        if not caught_up:
            self.findings.append(f"not caught up: {state}")
        if state.cursor is None:
            return None, caught_up
        rows_at = None
        if isinstance(self.writer, JavaWriter):
            writer = self.writer
            rows_at = lambda snap: writer.rows_at(snap, self.work)  # noqa: E731
        if self.sink_writer is not None:
            self.findings.extend(f"second writer: {p}" for p in self.sink_writer.check(self.sink.read()))
            self.findings.extend(f"second writer error: {e}" for e in self.sink_writer.errors[:3])
        if self.reset is not None:
            old, at = self.reset.old, self.reset.cursor
            return verify_reset(old, self.sink, table, at, state.cursor, rows_at), caught_up
        replayed = self.rewind.replayed if self.rewind is not None else frozenset()
        return verify(self.sink, table, state.cursor, rows_at, replayed=replayed), caught_up


def run_trial(spec: TrialSpec, config: TrialConfig, root: Path, *, keep: bool) -> TrialResult:
    work = root / f"trial-{spec.index:03d}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if spec.serve:
        from bench.chaos.serve_trial import ServeTrialRunner  # they build on this module

        result = ServeTrialRunner(spec, config, work).run()
    elif spec.fault == "replicas":
        from bench.chaos.replicas_trial import ReplicasTrialRunner

        result = ReplicasTrialRunner(spec, config, work).run()
    elif spec.fault == "keyed-repair":
        from bench.chaos.repair import RepairTrialRunner

        result = RepairTrialRunner(spec, config, work).run()
    else:
        result = TrialRunner(spec, config, work).run()
    if result.ok and not result.bad_lines and not keep:  # a bad exit line's logs are kept to look at
        shutil.rmtree(work, ignore_errors=True)
    return result
