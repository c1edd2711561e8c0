"""No secret in anything icetail prints or writes, with a table on S3 and credentials in the catalog.

The catalog's `s3.secret-access-key` is a distinctive string (tests.support.s3.SECRET_ACCESS_KEY).
Real `icetail` processes run `changes`, `plan --json`, `run`, `status` (text and JSON) and a
`changes` that fails on a data file deleted behind Iceberg's back; Spark's event log is enabled
(spark-defaults.conf in SPARK_CONF_DIR), so job and stage descriptions, task metrics and the
environment Spark records are captured too. Everything is then grepped for the secret: stdout,
stderr, the event log, the output files, the checkpoint store and the parquet sink.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icetail.kernel.secrets import REDACTED, redact_value, redacted_items
from icetail.reader.changes.read_setup import read_context
from icetail.sinks.iceberg.changelog import IcebergStager
from tests.support.processes import child_env, icetail_lines, run_icetail
from tests.support.s3 import SECRET_ACCESS_KEY, MotoServer, S3Catalog

pytestmark = pytest.mark.once  # line-independent and long: the Spark 4 line only (tests/conftest.py)

IDENT = "ns.t"


def _table(cat: S3Catalog) -> Any:
    catalog = cat.catalog()
    catalog.create_namespace("ns")
    table = catalog.create_table(IDENT, schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    table.append(pa.table({"id": [4, 5], "v": ["d", "e"]}))
    table.delete("id = 2")
    return catalog.load_table(IDENT)


def test_no_command_prints_or_writes_the_secret(s3_catalog: S3Catalog, moto: MotoServer, tmp_path: Path) -> None:
    table = _table(s3_catalog)
    conf_dir = tmp_path / "spark-conf"
    events = tmp_path / "spark-events"
    conf_dir.mkdir()
    events.mkdir()
    # uncompressed (Spark 4 compresses event logs by default), so the grep below reads the text
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\nspark.eventLog.compress false\n"
    )
    env = child_env([s3_catalog], tmp_path / "spark")  # type: ignore[list-item]
    env["SPARK_CONF_DIR"] = str(conf_dir)
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    common = ["--catalog", "s3cat", "--table", IDENT]
    runs = {
        "changes": run_icetail(["changes", *common, "--output", str(tmp_path / "out.parquet")], env),
        "changes-jsonl": run_icetail(["changes", *common, "--output", "-"], env),
        "plan": run_icetail(["plan", *common, "--json"], env),
        "run": run_icetail(
            ["run", *common, "--state", state, "--sink", f"parquet://{sink}", "--consumer", "c", "--once"], env
        ),
        "status": run_icetail(["status", "--state", state], env),
        "status-json": run_icetail(["status", "--state", state, "--json"], env),
    }
    for name, result in runs.items():
        assert result.returncode == 0, f"{name}: {result.stderr}"
    assert '"INSERT"' in runs["changes-jsonl"].stdout  # the commands really read the table

    # a storage failure: a data file removed behind Iceberg's back
    data_file = next(iter(table.scan().plan_files())).file.file_path
    moto.fs().delete_file(data_file.removeprefix("s3://"))
    failed = run_icetail(["changes", *common, "--output", str(tmp_path / "failed.parquet")], env)
    assert failed.returncode == 2, failed.stderr
    assert data_file in failed.stderr
    lines = icetail_lines(failed.stderr)
    assert len(lines) == 1 and lines[0].startswith("icetail: error: data file s3://"), failed.stderr
    runs["failed"] = failed

    event_logs = [p for p in events.rglob("*") if p.is_file()]
    assert event_logs, "Spark wrote no event log: the test would not see job descriptions"
    captured: dict[str, bytes] = {}
    for name, result in runs.items():
        captured[f"{name} stdout"] = result.stdout.encode()
        captured[f"{name} stderr"] = result.stderr.encode()
    for path in [*event_logs, *tmp_path.glob("*.parquet"), *sink.rglob("*"), tmp_path / "state.db"]:
        if path.is_file():
            captured[str(path)] = path.read_bytes()
    assert any(b"icetail change read" in captured[str(p)] for p in event_logs)  # job descriptions are in it
    leaks = [where for where, data in captured.items() if SECRET_ACCESS_KEY.encode() in data]
    assert leaks == []
    # the grep is not vacuous: the secret does reach the children (in their environment)
    assert SECRET_ACCESS_KEY in "".join(env.values())


def test_reprs_of_what_tasks_carry_are_redacted(s3_catalog: S3Catalog) -> None:
    table = _table(s3_catalog)
    context = read_context(table, None, [])
    assert SECRET_ACCESS_KEY in dict(context.io_properties).values()  # executors do get it
    assert SECRET_ACCESS_KEY not in repr(context)
    assert "s3.endpoint" in repr(context)  # what is not secret still helps debugging
    assert pickle.loads(pickle.dumps(context)) == context  # and it still travels whole
    stager = IcebergStager("{}", context.io_properties)
    assert SECRET_ACCESS_KEY not in repr(stager)


def test_redaction_rules() -> None:
    secrets = {
        "s3.secret-access-key": "x1",
        "s3.session-token": "x2",
        "s3.access-key-id": "x3",
        "gcs.oauth2.token": "x4",
        "adls.sas-token.account.dfs.core.windows.net": "x5",
        "adls.account-key": "x6",
        "adls.client-secret": "x7",
        "credential": "id:x8",
        "token": "x9",
        "client.secret-access-key": "x10",
        "adls.connection-string": "AccountName=a;AccountKey=x11",
        "hdfs.kerberos_ticket": "x12",
    }
    redacted = dict(redacted_items(secrets.items()))
    assert set(redacted.values()) == {REDACTED}
    assert redact_value("s3.endpoint", "http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    assert redact_value("uri", "postgresql://me:pw@db:5432/cat") == f"postgresql://me:{REDACTED}@db:5432/cat"
    assert redact_value("warehouse", "s3://bucket/wh") == "s3://bucket/wh"
