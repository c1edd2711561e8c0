"""A `serve-*` trial: `icetail serve` follows the table while a transient fault hurts it (PostgreSQL
cut, S3 stopped, slow or throttling, the catalog locked, a full disk), 1 to `max_faults` times at
seeded moments; it must ride every fault out in the same process: still running, caught up with
the source's head after the writer's last commit and the last fault's end, `/readyz` 200 again,
every change delivered exactly once (checked as `run` trials are), and exit 0 on SIGTERM.

`serve` runs with the product's defaults (`--max-failures 5`, backoff doubling from the
interval), `--interval 1s`: a fault it does not ride out stops a consumer, which is a finding.
"""

from __future__ import annotations

import signal
import subprocess
import time

from bench.chaos.faults import FaultShot, draw, fire
from bench.chaos.source import IDENT
from bench.chaos.trial import CONSUMER, RunRecord, TrialResult, TrialRunner
from tests.support.crash import kill_group
from tests.support.processes import REPO_ROOT, child_env
from tests.support.serve import free_port, http_get
from tests.support.stores import view_state

CATCH_UP_TIMEOUT = 240.0  # s after the writer's end and the last fault's for serve to catch up and be ready
STOP_TIMEOUT = 60.0  # s for serve to exit after SIGTERM (its --shutdown-timeout is 30 s)


class ServeTrialRunner(TrialRunner):
    def serve_command(self, port: int) -> list[str]:
        argv = self.command()
        argv[argv.index("run")] = "serve"
        argv.remove("--until-caught-up")
        return [*argv, "--interval", "1s", "--metrics-host", "127.0.0.1", "--metrics-port", str(port)]

    def run(self) -> TrialResult:
        started = time.monotonic()
        try:
            self.writer.create()
            env = child_env([self.source], self.work / "spark", extra=self.sink.env())
            shots = sorted(
                (draw(self.spec.base_fault, self.rng, self.config.horizon * 2)
                 for _ in range(self.rng.randint(1, self.config.max_faults))),
                key=lambda s: s.delay,
            )  # fmt: skip
            self.writer.start()
            record = self.serve_once(shots, env)
            self.writer.join()
            self.findings.extend(f"writer: {e}" for e in self.writer.errors)
            verdict, caught_up = self.check()
            return TrialResult(
                self.spec, (record,), verdict, caught_up, time.monotonic() - started, tuple(self.findings)
            )
        finally:
            self.close()

    def serve_once(self, shots: list[FaultShot], env: dict[str, str]) -> RunRecord:
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        err_path = logs / "serve.err"
        notes: list[str] = []
        with open(logs / "serve.out", "wb") as out, open(err_path, "wb") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                self.serve_command(port), env=env, cwd=REPO_ROOT, stdout=out, stderr=err, start_new_session=True
            )
            returncode: int | None = None
            try:
                for shot in shots:
                    while proc.poll() is None and time.monotonic() - t0 < shot.delay:
                        time.sleep(0.05)
                    if proc.poll() is not None:
                        break
                    notes.append(f"{shot}: {fire(shot, proc, self.targets)}")
                    if shot.kind.startswith("disk-full"):  # full for a while, as a disk stays full until freed
                        full = self.rng.uniform(3.0, 15.0)
                        time.sleep(full)
                        notes[-1] += f" for {full:.1f}s"
                    self.targets.settle()  # one fault at a time; each over before the next
                self.writer.join()
                self.targets.settle()
                recovered, why = self._wait_recovered(proc, port)
                if proc.poll() is not None:
                    self.findings.append(f"serve exited ({proc.returncode}) instead of riding the faults out")
                elif not recovered:
                    self.findings.append(f"serve did not recover within {CATCH_UP_TIMEOUT:.0f}s: {why}")
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        returncode = proc.wait(STOP_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        self.findings.append(f"serve ignored SIGTERM for {STOP_TIMEOUT:.0f}s")
                if returncode not in (None, 0):
                    self.findings.append(f"serve exited {returncode} on SIGTERM")
            finally:
                kill_group(proc)
            seconds = time.monotonic() - t0
        text = err_path.read_text(errors="replace")
        failed = text.count('"cycle failed"')
        lines = [line for line in text.splitlines() if line.strip()]
        problem = ""  # serve logs JSON lines: a stack trace among them is what a run's one-line rule forbids
        if "Traceback (most recent call last)" in text:
            problem = "traceback"
        elif "Exception in thread" in text or any(line.startswith("\tat ") for line in lines):
            problem = "java stack trace"
        return RunRecord(
            index=0,
            shot="; ".join(str(s) for s in shots),
            fired=bool(notes),
            note=f"{'; '.join(notes)}; {failed} cycles failed, then recovered in place",
            returncode=proc.returncode,
            seconds=seconds,
            last_line=lines[-1] if lines else "",
            tail=tuple(lines[-4:]),
            problem=problem,
            lease_left=False,
            stage=self._stage(),
        )

    def _wait_recovered(self, proc: subprocess.Popen[bytes], port: int) -> tuple[bool, str]:
        """Until the consumer's cursor is the source's head with no batch in flight and /readyz is 200."""
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        why = ""
        while proc.poll() is None and time.monotonic() < deadline:
            head = self.source.load(IDENT).metadata.current_snapshot_id
            try:
                state = view_state(self.store.direct_url, CONSUMER)
            except Exception as exc:  # noqa: BLE001 - no store yet
                state, why = None, f"state: {exc}"
            ready = http_get(f"http://127.0.0.1:{port}/readyz")
            if state is not None:
                why = f"cursor {state.cursor} (head {head}), {state.stage}; /readyz {ready}"
                if state.cursor == head and state.inflight_batch is None and ready and ready[0] == 200:
                    return True, ""
            time.sleep(0.5)
        return False, why

    def _stage(self) -> str:
        try:
            return view_state(self.store.direct_url, CONSUMER).stage
        except Exception:  # noqa: BLE001 - no store yet
            return "no store yet"
