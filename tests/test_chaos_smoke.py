"""Smoke test of the chaos harness (bench/chaos, issue 26): five seeded trials, small tables.

Each trial runs `icetail run` in child processes while a writer commits to the source table, hurts
the first run (SIGKILL of the process group; SIGTERM to the driver; the parquet+s3 sink's moto
server answering 503 SlowDown; SIGKILL under an Iceberg history sink; a second writer appending
to the Iceberg mirror's target meanwhile), resumes until caught up, and
checks the sink against the source's own snapshots (a history: the versions they imply; the
mirror: the rows at the cursor, and the second writer's rows all kept). The second test shows the check can fail: a
sink with one chunk file lost and another copied is reported as such. The last one is a `replicas`
trial (bench/chaos/replicas_trial.py): two `icetail serve` replicas of one configuration on a
PostgreSQL store, one of them cut off from it for longer than the lease TTL while the writers commit.
And a trial into a bus sink (NATS JetStream, bench/chaos/bus.py): `icetail run` SIGKILLed with a
batch in flight, resumed, the stream's envelopes read back as changes, each exactly once.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench.chaos.bus import unreachable
from bench.chaos.places import Sink
from bench.chaos.plan import TrialSpec
from bench.chaos.s3 import close_moto
from bench.chaos.source import IDENT
from bench.chaos.trial import TrialConfig, TrialResult, run_trial
from bench.chaos.verify import verify
from tests.support.catalogs import LocalCatalog
from tests.support.stores import pg_unavailable

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

CONFIG = TrialConfig(rows=400, chunk_rows=100, max_faults=1, horizon=5.0, writer_gap=(0.3, 1.0), max_runs=4)
SPECS = [
    TrialSpec(0, "cow-overwrite", "sqlite", "parquet", "sigkill", seed=20261126),
    TrialSpec(1, "schema-evolution", "sqlite", "parquet", "sigterm", seed=20261127),
    TrialSpec(2, "append-delete", "sqlite", "parquet+s3", "s3-503", seed=20261128),
    TrialSpec(3, "cow-overwrite", "sqlite", "icehistory", "sigkill", seed=20261129),
    TrialSpec(4, "append-delete", "sqlite", "icemirror", "sink-writer", seed=20261130),
]

# two tables, two replicas; a cut of one replica's PostgreSQL proxy (7-12 s, past the 6 s lease TTL) 0.4 s in
REPLICAS_SPEC = TrialSpec(5, "append-delete", "postgresql", "parquet", "replicas", seed=20261193, replicas=2)
# a SIGKILL 4.5 s in (here: a batch in flight, its chunk published, not committed), into a NATS stream
NATS_SPEC = TrialSpec(6, "append-delete", "sqlite", "nats", "sigkill", seed=20261201)


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[TrialResult]]:
    """The trials, run once for the module; their work folders are kept for the second test."""
    root = tmp_path_factory.mktemp("chaos")
    try:
        return root, [run_trial(spec, CONFIG, root, keep=True) for spec in SPECS]
    finally:
        close_moto()  # the S3 trial's server


def test_chaos_trials_deliver_exactly_once(trials: tuple[Path, list[TrialResult]]) -> None:
    _, results = trials
    for result in results:
        runs = "\n".join(f"{r.shot or 'final'}: exit {r.returncode} [{r.stage}]: {r.tail}" for r in result.runs)
        assert result.verdict is not None and result.caught_up, f"{result.findings}\n{runs}"
        assert (result.verdict.lost, result.verdict.duplicated, result.verdict.foreign) == (0, 0, 0), result.verdict
        assert result.verdict.expected > 0
        assert result.bad_lines == 0, runs
        assert result.ok, f"{result.findings}\n{runs}"
    assert sum(len(r.runs) for r in results) >= 2 * len(SPECS)  # a hurt run, then a resumed one
    assert sum(r.faults for r in results) >= 1, "no fault landed: the runs all ended before it"


def test_the_second_writer_of_the_mirror_target_kept_its_rows(trials: tuple[Path, list[TrialResult]]) -> None:
    root, results = trials
    (result,) = [r for r in results if r.spec.fault == "sink-writer"]
    work = root / f"trial-{result.spec.index:03d}"
    target = LocalCatalog("chaossink", work / "sinkcatalog").load("out.mirror")
    ids = target.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    foreign = [i for i in ids if i < 0]
    assert foreign, "the second writer committed nothing while the run wrote the mirror"
    assert len(foreign) == len(set(foreign))  # and the trial's own check: each of its appends there once


def test_the_check_sees_a_lost_and_a_repeated_chunk(trials: tuple[Path, list[TrialResult]]) -> None:
    root, results = trials
    work = root / f"trial-{results[0].spec.index:03d}"
    sink = Sink("parquet", "", path=work / "sink")
    table = LocalCatalog("chaossrc", work / "source").load(IDENT)
    cursor = table.metadata.current_snapshot_id
    assert cursor is not None
    assert verify(sink, table, cursor).ok(exactly_once=True)
    files = sorted((work / "sink").glob("*.parquet"), key=lambda p: p.stat().st_size)
    assert len(files) >= 2, files
    shutil.copy(files[-1], work / "sink" / "copy-of-a-chunk.parquet")
    before = verify(sink, table, cursor).delivered
    files[0].unlink()
    verdict = verify(sink, table, cursor)
    assert verdict.duplicated > 0 and verdict.lost > 0, verdict
    assert verdict.lost == before - verdict.delivered, verdict  # the deleted file's rows, each missed once
    assert not verdict.ok(exactly_once=True)


def test_the_history_check_sees_a_lost_version(trials: tuple[Path, list[TrialResult]]) -> None:
    root, results = trials
    (result,) = [r for r in results if r.spec.sink == "icehistory"]
    work = root / f"trial-{result.spec.index:03d}"
    sinkcat = LocalCatalog("chaossink", work / "sinkcatalog")
    sink = Sink("icehistory", "", catalog=sinkcat)
    table = LocalCatalog("chaossrc", work / "source").load(IDENT)
    cursor = table.metadata.current_snapshot_id
    assert cursor is not None
    held = verify(sink, table, cursor)
    assert held.ok(exactly_once=True) and held.expected > table.scan().to_arrow().num_rows, held  # closed ones too
    target = sinkcat.load("out.history")
    closed = target.scan(row_filter="_valid_to_snapshot_id IS NOT NULL").to_arrow().slice(0, 1).to_pylist()
    assert closed, "an overwrite closes versions"
    version = closed[0]
    target.delete(f"id == {version['id']} and _valid_from_snapshot_id == {version['_valid_from_snapshot_id']}")
    verdict = verify(sink, table, cursor)
    assert (verdict.lost, verdict.duplicated, verdict.foreign) == (1, 0, 0), verdict


def test_a_replicas_trial_delivers_exactly_once(tmp_path: Path) -> None:
    if reason := pg_unavailable():
        pytest.skip(reason)
    result = run_trial(REPLICAS_SPEC, CONFIG, tmp_path, keep=True)
    runs = "\n".join(f"{r.shot or 'not hurt'}: exit {r.returncode}: {r.note}: {r.tail}" for r in result.runs)
    assert result.verdict is not None and result.caught_up, f"{result.findings}\n{runs}"
    assert (result.verdict.lost, result.verdict.duplicated, result.verdict.foreign) == (0, 0, 0), result.verdict
    assert result.verdict.expected > 0
    assert result.ok and result.bad_lines == 0, f"{result.findings}\n{runs}"
    assert len(result.runs) == 2 and result.faults == 1, runs  # the two replicas, one of them cut off
    assert re.search(r"audit: \d+ writes, [1-9]\d* batches", runs), runs  # the audit trigger saw the batches


def test_a_bus_sink_trial_delivers_exactly_once(tmp_path: Path) -> None:
    if reason := unreachable("nats"):
        pytest.skip(reason)
    result = run_trial(NATS_SPEC, CONFIG, tmp_path, keep=True)
    runs = "\n".join(f"{r.shot or 'final'}: exit {r.returncode} [{r.stage}]: {r.tail}" for r in result.runs)
    assert result.verdict is not None and result.caught_up, f"{result.findings}\n{runs}"
    assert (result.verdict.lost, result.verdict.duplicated, result.verdict.foreign) == (0, 0, 0), result.verdict
    assert result.verdict.torn_lines == 0 and result.verdict.expected > 0, result.verdict  # each message an envelope
    assert result.ok and result.bad_lines == 0, f"{result.findings}\n{runs}"
    assert result.faults == 1 and len(result.runs) == 2, runs  # killed, then resumed to the end
