"""Leases from the command line: one run per consumer, SIGTERM ends a run in one line and releases
its lease, a killed run's lease is taken over at once on the same host.

The fixtures and the five-snapshot table: tests/pipeline/run_cli_support.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.api import read_changes
from icetail.state.store import open_store
from tests.pipeline import run_cli_support
from tests.pipeline.run_cli_support import (
    SHARED,
    Env,
    assert_one_line_error,
    assert_sink_holds,
    dump_state,
    icetail_here,
    recorded_sink,
    run_args,
)
from tests.support.crash import kill_group
from tests.support.holds import HOLD_AFTER_CHUNK_ENV, HOLD_SESSION_START_ENV, hold_env
from tests.support.processes import icetail_command, icetail_lines, run_icetail
from tests.support.sinks import read_parquet_sink

env = run_cli_support.env
seeded_state = run_cli_support.seeded_state  # base_state copies it
base_state = run_cli_support.base_state


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_second_run_of_a_consumer_refuses_while_the_first_holds_the_lease(env: Env, tmp_path: Path) -> None:
    """The first run holds after its first chunk until the hold file is removed (a test seam), so
    the second run, reset and status certainly meet it in progress, however fast the machine."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "pair", SHARED, "--chunk-rows", "3")
    log = tmp_path / "first.log"
    hold = tmp_path / "hold"  # while it exists, the first run waits after a committed chunk
    hold.touch()
    with open(log, "w") as out:
        first = subprocess.Popen(
            [*icetail_command(), *args],
            env={**env.child, **hold_env(HOLD_AFTER_CHUNK_ENV, hold)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_file(Path(f"{hold}.held"), first, timeout=120)  # the first run is mid-batch, holding its lease
        owner = _lease_owner(state, "pair")
        assert f":{first.pid}:" in owner, owner
        second = run_icetail(args, env.child)
        reset = run_icetail(["reset", "--state", state, "--consumer", "pair", "--to", "earliest"], env.child)
        status = run_icetail(["status", "--state", state, "--json"], env.child)
        assert first.poll() is None, "the held run must still be running"
    finally:
        hold.unlink(missing_ok=True)
        first.wait(timeout=300)
    assert first.returncode == 0, log.read_text()
    # refused: transient (exit 1, retry later), one line naming the holder
    assert_one_line_error(second, 1, "leased to", owner)
    assert_one_line_error(reset, 1, "leased to")
    assert json.loads(status.stdout)[0]["lease_owner"] == owner
    assert_sink_holds(sink, read_changes(env.shared))


def test_sigterm_mid_batch_ends_in_one_line_and_releases_the_lease(env: Env, tmp_path: Path) -> None:
    """A supervisor's SIGTERM (to the driver only, as systemd or Kubernetes send it) mid-batch: the
    run says so in one line, exits 143 and releases its lease, so the next run starts at once and
    finishes the batch exactly. It used to die silently with its lease held (chaos harness,
    issue 26)."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "term", SHARED, "--chunk-rows", "3")
    hold = tmp_path / "hold"
    hold.touch()
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env={**env.child, **hold_env(HOLD_AFTER_CHUNK_ENV, hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_file(Path(f"{hold}.held"), run, timeout=120)  # mid-batch, lease held
        assert f":{run.pid}:" in _lease_owner(state, "term")
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        hold.unlink(missing_ok=True)
        kill_group(run)
    lines = icetail_lines(err)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert lines == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err
    with open_store(state, create=False) as store:
        checkpoint = store.load("term")
    assert checkpoint is not None and checkpoint.lease is None, checkpoint
    assert checkpoint.inflight is not None, "the SIGTERM must have landed mid-batch"
    again = run_icetail(args, env.child)
    assert again.returncode == 0, again.stderr
    assert_sink_holds(sink, read_changes(env.shared))


def test_sigterm_during_start_up_ends_in_one_line(env: Env, tmp_path: Path) -> None:
    """SIGTERM while the command is still importing pyspark (its first seconds): one line, exit 143,
    never a silent death (the handler is installed before the commands are imported).

    The signal is sent as soon as the process catches SIGTERM, not after a fixed sleep: the product
    promises the line from the moment its handler is in place (icetail/monitor/cli/launch.py), and
    leaves the interpreter's own start-up before it to the default action; on a busy machine that
    start-up alone outlasted any sleep short enough to still land among the imports (issue 47)."""
    args = run_args(f"sqlite:///{tmp_path}/state.db", tmp_path / "sink", "early")
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env=env.child,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_sigterm_handler(run, timeout=300)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=300)  # a guard against a hang: no exit time is promised
    finally:
        kill_group(run)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert icetail_lines(err) == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err


def test_sigterm_while_the_jvm_starts_ends_in_one_line_without_waiting_for_it(env: Env, tmp_path: Path) -> None:
    """SIGTERM with a batch planned and the Spark JVM still starting: the run gives the start up
    instead of waiting for it (under load a JVM start outlasted the harness's 20 s grace period,
    without a line: issue 26 finding 11), says so in one line, and the next run delivers exactly.
    The start is held by a test seam, so it provably never finishes before the stop."""
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    args = run_args(state, sink, "starting", SHARED)
    hold = tmp_path / "hold-start"
    hold.touch()
    run = subprocess.Popen(
        [*icetail_command(), *args],
        env={**env.child, **hold_env(HOLD_SESSION_START_ENV, hold)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_file(Path(f"{hold}.held"), run, timeout=120)  # the JVM is asked for only after the hold
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)  # waiting for the held start would never end
    finally:
        kill_group(run)
    assert hold.exists(), "the start was held for the whole run"
    assert run.returncode == 128 + signal.SIGTERM, err
    assert icetail_lines(err) == ["icetail: stopped by SIGTERM; the next run resumes a batch in flight"], err
    with open_store(state, create=False) as store:
        checkpoint = store.load("starting")
    assert checkpoint is None or checkpoint.lease is None, checkpoint
    again = run_icetail(args, env.child)
    assert again.returncode == 0, again.stderr
    assert_sink_holds(sink, read_changes(env.shared))


def _wait_for_file(path: Path, proc: subprocess.Popen[Any], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended before creating {path}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _wait_for_sigterm_handler(proc: subprocess.Popen[Any], *, timeout: float) -> None:
    """Until `proc` catches SIGTERM (Linux: its SigCgt mask in /proc), i.e. its handler is installed."""
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "the run ended before it caught SIGTERM"
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            status = ""
        caught = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
        if caught and int(caught[0], 16) & bit:
            return
        assert time.monotonic() < deadline, f"the run caught no SIGTERM within {timeout}s (a hang)"
        time.sleep(0.005)


def _lease_owner(state: str, consumer: str) -> str:
    with open_store(state, create=False) as store:
        checkpoint = store.load(consumer)
    assert checkpoint is not None and checkpoint.lease is not None and checkpoint.lease_is_live()
    return checkpoint.lease.owner


def _wait_for_lease(state: str, consumer: str, proc: subprocess.Popen[Any], *, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    store = None
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the first run ended before taking its lease"
            if store is None and Path(state.removeprefix("sqlite:///")).exists():
                try:  # never create: the child may not have made its tables yet; poll again then
                    store = open_store(state, create=False)
                except ConfigError:
                    pass
            checkpoint = store.load(consumer) if store is not None else None
            if checkpoint is not None and checkpoint.lease_is_live() and checkpoint.lease is not None:
                return checkpoint.lease.owner
            time.sleep(0.05)
    finally:
        if store is not None:
            store.close()
    raise AssertionError("the first run never took its lease")


@pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)
def test_a_killed_runs_lease_is_taken_over_at_once_on_the_same_host(env: Env, tmp_path: Path) -> None:
    """The holder `host:pid:token` is gone (SIGKILL): the next run takes over instead of waiting 120 s."""
    state = f"sqlite:///{tmp_path}/state.db"
    args = run_args(state, tmp_path / "sink", "killed")
    with open(tmp_path / "first.log", "w") as out:
        first = subprocess.Popen(
            [*icetail_command(), *args], env=env.child, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        owner = _wait_for_lease(state, "killed", first, timeout=300)  # a guard against a hang: start-up under load
    finally:
        kill_group(first)
    with open_store(state) as store:
        checkpoint = store.load("killed")
    assert checkpoint is not None and checkpoint.lease is not None and checkpoint.lease.owner == owner
    assert checkpoint.lease_is_live()  # left behind by the killed run
    second = run_icetail(args, env.child)
    assert second.returncode == 0, second.stderr
    with open_store(state) as store:
        after = store.load("killed")
    assert after is not None and after.inflight is None and not after.lease_is_live()


def test_status_of_a_store_that_does_not_exist(env: Env, tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "state.db"
    result = run_icetail(["status", "--state", f"sqlite:///{missing}"], env.child)
    if result.returncode == 0:
        assert missing.exists()
        pytest.fail("bug: `status` on a missing SQLite store creates it (and its directories) and exits 0")
    assert_one_line_error(result, 2, str(missing))
    assert not missing.exists()


def test_run_and_reset_refuse_a_consumer_leased_by_another_host(env: Env, base_state: str, tmp_path: Path) -> None:
    with open_store(base_state) as store:
        store.acquire_lease("base", "otherhost:4242:feedbeef", 60)
    before = dump_state(base_state)
    result = run_icetail(run_args(base_state, tmp_path / "sink", "base"), env.child)
    assert_one_line_error(result, 1, "otherhost:4242:feedbeef")
    reset = run_icetail(["reset", "--state", base_state, "--consumer", "base", "--to", "earliest"], env.child)
    assert_one_line_error(reset, 1, "otherhost:4242:feedbeef")
    assert dump_state(base_state) == before
    assert read_parquet_sink(tmp_path / "sink") is None


def test_reset_takes_over_the_lease_of_a_run_killed_on_this_host(
    env: Env, base_state: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chaos harness (issue 26, `reset-sink`): after a SIGKILL, `reset` was refused for the rest of the
    TTL ("leased to host:pid:token ... stop that run") although that run was gone; `run` already
    took such a lease over. A holder that still runs on this host is still refused."""
    from icetail.kernel.processes import host_name

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid of this host that no longer runs
    with open_store(base_state) as store:
        store.acquire_lease("base", f"{host_name()}:{gone.pid}:deadbeef", 120)
    code, out, err = icetail_here(
        capsys, "reset", "--state", base_state, "--consumer", "base", "--sink", f"parquet://{tmp_path}/moved"
    )
    assert (code, out) == (0, ""), err
    assert recorded_sink(base_state, "base") == f"parquet://{tmp_path}/moved"

    alive = subprocess.Popen(["sleep", "60"])
    try:
        with open_store(base_state) as store:
            store.acquire_lease("base", f"{host_name()}:{alive.pid}:cafef00d", 120)
        before = dump_state(base_state)
        code, _, err = icetail_here(
            capsys, "reset", "--state", base_state, "--consumer", "base", "--sink", f"parquet://{tmp_path}/again"
        )
        assert code == 1 and f"{alive.pid}:cafef00d" in err and err.count("\n") == 1, err
        assert dump_state(base_state) == before
    finally:
        alive.kill()
        alive.wait()
