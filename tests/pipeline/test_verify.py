"""`--verify` on a table whose summary lies: warn delivers and logs, strict refuses and keeps the checkpoint.

The table has four appends: S1 ids 0-9, S2 ids 10-19, S3 ids 20-24, S4 ids 25-29; S3's summary
claims 6 added records (its metadata file rewritten, tests/support/summaries.py). Chunks of two
rows, so S3 is read as three chunks and a refused snapshot could leak up to two of them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import icetail
from icetail.monitor.cli.main import main as cli_main
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.engine.pipeline import Pipeline
from icetail.monitor.engine.verify import SnapshotCheckError
from icetail.monitor.service.metrics import Metrics
from icetail.reader.changes.checks import SnapshotCheck
from tests.support.catalogs import LocalCatalog, catalogs_in_process, new_catalog
from tests.support.sinks import SinkSpec, make_sink, read_parquet_sink
from tests.support.summaries import doctor_summary
from tests.support.tables import BASE_SCHEMA, make_rows

CATALOG = "verifycat"
TABLE = "ns.liar"


@dataclass(frozen=True)
class Liar:
    catalog: LocalCatalog
    ids: list[int]  # S1..S4

    @property
    def liar(self) -> int:
        return self.ids[2]


@pytest.fixture(scope="module")
def liar(tmp_path_factory: pytest.TempPathFactory) -> Liar:
    cat = new_catalog(tmp_path_factory.mktemp("verify") / "catalog", CATALOG)
    catalog = cat.catalog()
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(TABLE, schema=BASE_SCHEMA)
    for ids in (range(10), range(10, 20), range(20, 25), range(25, 30)):
        table.append(make_rows(BASE_SCHEMA, ids))
    table = catalog.load_table(TABLE)
    ids = [s.snapshot_id for s in table.metadata.snapshots]
    assert table.snapshot_by_id(ids[2]).summary["added-records"] == "5"  # type: ignore[union-attr]
    doctor_summary(table, ids[2], added_records="6")
    return Liar(cat, ids)


@pytest.fixture
def here(liar: Liar, spark: Any) -> Iterator[None]:
    with catalogs_in_process(liar.catalog):
        yield


def _config(tmp_path: Path, verify: str, consumer: str = "c", sink: str | None = None) -> PipelineConfig:
    return PipelineConfig(
        CATALOG,
        TABLE,
        f"sqlite:///{tmp_path / 'state.db'}",
        sink or f"parquet://{tmp_path / 'sink'}",
        consumer=consumer,
        chunk_rows=2,
        verify=verify,
    )


def _sink_ids(tmp_path: Path) -> Counter[int]:
    rows = read_parquet_sink(tmp_path / "sink")
    return Counter() if rows is None else Counter(rows.column("id").to_pylist())


@pytest.mark.parametrize("kind", ["parquet", "iceberg"])
def test_strict_refuses_the_snapshot_keeps_the_checkpoint_and_a_warn_rerun_resumes(
    liar: Liar, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """Both exactly-once sinks stage chunks in Spark tasks (parquet: `_tmp`, Iceberg: data files
    not yet committed): a refused snapshot's staged chunks are never published."""
    sink = make_sink(kind, tmp_path, catalog_name="verifysink")
    catalogs = [liar.catalog] + ([sink.catalog] if sink.catalog is not None else [])
    with catalogs_in_process(*catalogs):
        _strict_then_warn(liar, tmp_path, caplog, sink)


def _sink_rows(sink: SinkSpec) -> Counter[int]:
    rows = sink.read()
    return Counter() if rows is None else Counter(rows.column("id").to_pylist())


def _strict_then_warn(liar: Liar, tmp_path: Path, caplog: pytest.LogCaptureFixture, sink: SinkSpec) -> None:
    checks: list[SnapshotCheck] = []
    with Pipeline(_config(tmp_path, "strict", sink=sink.url), on_check=checks.append) as pipeline:
        with pytest.raises(SnapshotCheckError) as refused:
            pipeline.run()
        checkpoint = pipeline.checkpoint()
    message = str(refused.value)
    assert "\n" not in message
    for fragment in (f"snapshot {liar.liar}", "added-records", "says 6", "give 5", "--verify warn"):
        assert fragment in message, message
    assert isinstance(refused.value, icetail.TerminalError)
    assert checkpoint is not None and checkpoint.cursor.snapshot_id is None  # not advanced
    assert checkpoint.inflight is not None  # the batch stays in flight
    batch_id = checkpoint.inflight.batch.batch_id
    assert _sink_rows(sink) == Counter(range(20))  # S1, S2 delivered; nothing of S3 published
    assert [(c.snapshot_id, [m.rule for m in c.mismatches]) for c in checks] == [
        (liar.ids[0], []),
        (liar.ids[1], []),
        (liar.liar, ["added-records"]),
    ]

    published = sink.fingerprint()
    with Pipeline(_config(tmp_path, "strict", sink=sink.url)) as pipeline:  # a strict rerun refuses again
        with pytest.raises(SnapshotCheckError):
            pipeline.run()
    assert sink.fingerprint() == published

    assert len([r for r in caplog.records if r.name == "icetail.verify"]) == 2  # strict logs before refusing
    caplog.clear()
    with Pipeline(_config(tmp_path, "warn", sink=sink.url)) as pipeline:
        outcomes = pipeline.run()
        checkpoint = pipeline.checkpoint()
    assert outcomes[0].batch_id == batch_id and outcomes[0].resumed and outcomes[0].check_mismatches == 1
    assert checkpoint is not None and checkpoint.cursor.snapshot_id == liar.ids[3]
    assert _sink_rows(sink) == Counter(range(30))  # every row exactly once
    (record,) = [r for r in caplog.records if r.name == "icetail.verify"]
    assert record.snapshot_id == liar.liar and record.rule == "added-records"  # type: ignore[attr-defined]
    assert (record.expected, record.found) == (6, 5)  # type: ignore[attr-defined]


def test_warn_delivers_logs_and_counts_the_mismatch(
    liar: Liar, here: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics.create()
    metrics.register_consumer(TABLE, "w")

    def record(check: SnapshotCheck) -> None:
        metrics.record_snapshot_check(TABLE, "w", check.rules, [m.rule for m in check.mismatches])

    caplog.set_level(logging.WARNING, logger="icetail.verify")
    with Pipeline(_config(tmp_path, "warn", "w"), on_check=record) as pipeline:
        outcomes = pipeline.run()
    assert [o.check_mismatches for o in outcomes] == [1]
    assert outcomes[0].snapshots_checked == 4
    assert _sink_ids(tmp_path) == Counter(range(30))
    assert [r.getMessage() for r in caplog.records if r.name == "icetail.verify"] == [
        f"snapshot {liar.liar} fails summary rule added-records: its summary says 6, icetail's changes give 5"
    ]

    def sample(name: str, rule: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"table": TABLE, "consumer": "w", "rule": rule})

    assert sample("icetail_snapshot_check_mismatches_total", "added-records") == 1.0
    assert sample("icetail_snapshot_check_mismatches_total", "total-records") == 0.0  # S3's total is honest
    assert sample("icetail_snapshot_checks_total", "added-records") == 4.0
    assert sample("icetail_snapshot_checks_total", "dv-net") == 0.0


def test_off_checks_nothing(liar: Liar, here: None, tmp_path: Path) -> None:
    checks: list[SnapshotCheck] = []
    with Pipeline(_config(tmp_path, "off"), on_check=checks.append) as pipeline:
        outcomes = pipeline.run()
    assert checks == [] and outcomes[0].snapshots_checked == 0
    assert _sink_ids(tmp_path) == Counter(range(30))


def test_python_api_verify(liar: Liar, here: None) -> None:
    table = icetail.load_table(CATALOG, TABLE)
    with pytest.raises(SnapshotCheckError, match=f"snapshot {liar.liar} fails summary rule added-records"):
        icetail.read_changes(table, verify="strict")
    reader = icetail.changes_batch_reader(table, verify="strict")
    got: list[pa.RecordBatch] = []
    with pytest.raises(icetail.TerminalError):
        for batch in reader:
            got.append(batch)
    assert sorted(pa.Table.from_batches(got).column("id").to_pylist()) == list(range(20))  # never a row of S3
    assert icetail.read_changes(table, verify="warn").num_rows == 30
    assert icetail.read_changes(table, liar.ids[2], verify="strict").num_rows == 5  # S4 alone is honest
    with pytest.raises(icetail.TerminalError, match="verify 'loud' is not one of off, warn, strict"):
        icetail.read_changes(table, verify="loud")


def test_changes_command_strict_fails_with_one_line_and_no_file(
    liar: Liar, here: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.parquet"
    args = ["changes", "--catalog", CATALOG, "--table", TABLE, "--output", str(output)]
    capsys.readouterr()
    assert cli_main([*args, "--verify", "strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"icetail: error: snapshot {liar.liar} fails summary rule added-records"), line
    assert not output.exists() and list(tmp_path.iterdir()) == []

    assert cli_main([*args, "--verify", "off"]) == 0
    assert pa.parquet.read_table(output).num_rows == 30
    assert cli_main([*args, "--verify", "loud"]) == 2
    assert "--verify 'loud' is not one of off, warn, strict" in capsys.readouterr().err


def test_run_command_strict_exits_2_with_one_line(
    liar: Liar, here: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, sink = f"sqlite:///{tmp_path / 'state.db'}", f"parquet://{tmp_path / 'sink'}"
    args = ["run", "--catalog", CATALOG, "--table", TABLE, "--state", state, "--sink", sink, "--consumer", "r"]
    capsys.readouterr()
    assert cli_main([*args, "--verify", "strict"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"snapshot {liar.liar} fails summary rule added-records" in line and "checkpoint did not move" in line
    assert cli_main(args) == 0  # the default, warn, delivers the rest
    assert _sink_ids(tmp_path) == Counter(range(30))


def test_a_snapshot_partly_delivered_before_a_crash_is_not_checked_on_resume(
    liar: Liar, here: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The resumed run reads only the rest of S3, so its counts cannot be compared with S3's summary:
    it is delivered unchecked (docs/semantics.md), never refused on a partial count; S4 is checked."""
    from icetail.sinks.files.parquet import ParquetDirSink
    from tests.support.sinks import CrashingSink, SimulatedCrash

    # chunks of two rows: S1 and S2 are five chunks each, S3's first chunk is write 11
    crashing = CrashingSink(ParquetDirSink(tmp_path / "sink", consumer="k"), 12, after_write=False)
    with pytest.raises(SimulatedCrash), Pipeline(_config(tmp_path, "warn", "k"), sink=crashing) as pipeline:
        pipeline.run()
    assert _sink_ids(tmp_path) == Counter(range(22))
    checks: list[SnapshotCheck] = []
    with Pipeline(_config(tmp_path, "strict", "k"), on_check=checks.append) as pipeline:
        outcomes = pipeline.run()
    assert [c.snapshot_id for c in checks] == [liar.ids[3]] and not checks[0].mismatches
    assert outcomes[0].resumed and _sink_ids(tmp_path) == Counter(range(30))
    assert not [r for r in caplog.records if r.name == "icetail.verify"]


def test_net_changes_are_checked_too(liar: Liar, here: None, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`--net` reads every snapshot whole, so every snapshot is checked; the fold returns nothing
    before the range is read, so strict refuses before any row leaves (API, `run`)."""
    table = icetail.load_table(CATALOG, TABLE)
    with pytest.raises(SnapshotCheckError, match=f"snapshot {liar.liar} fails summary rule added-records"):
        icetail.read_changes(table, net=True, verify="strict")
    caplog.set_level(logging.WARNING, logger="icetail.verify")
    caplog.clear()
    assert icetail.read_changes(table, net=True).num_rows == 30  # warn: delivered as read, logged
    assert [r.snapshot_id for r in caplog.records if r.name == "icetail.verify"] == [liar.liar]  # type: ignore[attr-defined]

    config = replace(_config(tmp_path, "strict", "n"), net=True)
    with Pipeline(config) as pipeline:
        with pytest.raises(SnapshotCheckError):
            pipeline.run()
        checkpoint = pipeline.checkpoint()
    assert checkpoint is not None and checkpoint.cursor.snapshot_id is None
    assert _sink_ids(tmp_path) == Counter()  # nothing of the net batch was written
