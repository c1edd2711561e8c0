"""Tables behind an Iceberg REST catalog, read with the storage credentials the catalog vends.

The catalog is the REST test fixture (tests.support.rest_catalog): OAuth2 client credentials,
tables kept in a SQL catalog on S3, temporary S3 keys (STS) vended with every table load. The
S3 server (`checking_s3`) checks every request's signature and permissions, and the `icetail`
children have no storage credentials of their own (no AWS_* variables, no s3.* keys in the
catalog's configuration): whatever they read, they read with vended keys. The same client
asking for no vended credentials is refused by S3, which shows it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icetail.monitor.cli.main import main as cli_main
from icetail.reader.changes.read_setup import read_context
from tests.storage.test_s3_reading import _apply, _ordered, _rows
from tests.support.catalogs import catalogs_in_process
from tests.support.processes import child_env, icetail_lines, run_icetail
from tests.support.rest_catalog import CheckingS3, RestCatalogFixture, iter_secrets_in, new_rest_catalog
from tests.support.serve import Serve, free_port, wait_until
from tests.support.sinks import read_parquet_sink
from tests.support.tables import build_mixed_table

pytestmark = pytest.mark.once  # line-independent and long: the Spark 3.5 line only (ONCE_ON_SPARK35, tests/conftest.py)

IDENT = "ns.mixed"


def _rest_env(cat: RestCatalogFixture, spark_dir: Path) -> dict[str, str]:
    """A child's environment: the REST catalog by name, and no storage credentials at all."""
    env = {k: v for k, v in child_env([], spark_dir).items() if not k.startswith(("AWS_", "PYICEBERG_"))}
    env.update(cat.env())
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # no instance role to fall back on either
    return env


def _exact(changes: pa.Table, table: Any) -> None:
    """The change stream from the start, applied to nothing, is the table's current rows."""
    columns = [f.name for f in table.schema().fields]
    assert _apply(Counter(), changes, columns) == _rows(table.scan().to_arrow(), columns)


def test_changes_and_run_read_with_vended_credentials_only(
    rest_catalog: RestCatalogFixture, checking_s3: CheckingS3, tmp_path: Path
) -> None:
    table = build_mixed_table(rest_catalog, IDENT)  # type: ignore[arg-type]
    assert table.metadata_location.startswith("s3://")
    conf_dir, events = tmp_path / "spark-conf", tmp_path / "spark-events"
    conf_dir.mkdir()
    events.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n")
    env = _rest_env(rest_catalog, tmp_path / "spark")
    env["SPARK_CONF_DIR"] = str(conf_dir)
    assert not [k for k in env if k.startswith("AWS_ACCESS") or "__S3__" in k and "KEY" in k], "no keys of its own"

    vended_before = len(checking_s3.vended)
    out = tmp_path / "changes.parquet"
    state = f"sqlite:///{tmp_path}/state.db"
    sink = tmp_path / "sink"
    common = ["--catalog", "restcat", "--table", IDENT]
    runs = {
        "changes": run_icetail(["changes", *common, "--output", str(out)], env),
        "run": run_icetail(
            [
                "run",
                *common,
                "--state",
                state,
                "--sink",
                f"parquet://{sink}",
                "--consumer",
                "c1",
                "--until-caught-up",
                "--chunk-rows",
                "97",
            ],
            env,
        ),  # fmt: skip
        "status": run_icetail(["status", "--state", state, "--json"], env),
    }
    for name, result in runs.items():
        assert result.returncode == 0, f"{name}: {result.stderr}"
    assert len(checking_s3.vended) > vended_before  # the children asked for and got keys

    changes = pq.read_table(out)
    _exact(changes, rest_catalog.load(IDENT))
    delivered = read_parquet_sink(sink)
    assert delivered is not None
    cols = [c for c in changes.column_names if c != "_change_ordinal"]
    assert Counter(_ordered(delivered, cols)) == Counter(_ordered(changes, cols))

    # the same client asking for no vended credentials falls back on the process's own AWS chain,
    # here a key S3 does not know: refused (so what the runs above used were the vended keys)
    refused_env = {
        **env,
        "PYICEBERG_CATALOG__RESTCAT__HEADER__X_ICEBERG_ACCESS_DELEGATION": "remote-signing",
        "AWS_ACCESS_KEY_ID": "AKIAUNKNOWNTOTHESTORE",
        "AWS_SECRET_ACCESS_KEY": "not-a-vended-secret",
    }
    vended = len(checking_s3.vended)
    refused = run_icetail(["changes", *common, "--output", str(tmp_path / "refused.parquet")], refused_env)
    assert len(checking_s3.vended) == vended
    lines = icetail_lines(refused.stderr)
    assert refused.returncode == 2 and len(lines) == 1 and "s3://" in lines[0], refused.stderr
    runs["refused"] = refused

    # no secret in anything captured: client secret, bearer tokens, vended keys and session tokens
    captured: dict[str, bytes] = {}
    for name, result in runs.items():
        captured[f"{name} stdout"] = result.stdout.encode()
        captured[f"{name} stderr"] = result.stderr.encode()
    event_logs = [p for p in events.rglob("*") if p.is_file()]
    assert event_logs, "Spark wrote no event log"
    for path in [*event_logs, out, *sink.rglob("*"), tmp_path / "state.db"]:
        if path.is_file():
            captured[str(path)] = path.read_bytes()
    secrets = rest_catalog.secrets()
    assert len(secrets) >= 4 and len(rest_catalog.tokens) >= 3
    leaks = {where: list(iter_secrets_in(data, secrets)) for where, data in captured.items()}
    assert {where: found for where, found in leaks.items() if found} == {}
    assert rest_catalog.client_secret in "".join(env.values())  # the grep is not vacuous


def test_storage_credentials_per_table_prefix(
    checking_s3: CheckingS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    """Keys vended as `storage-credentials` for the table's location (the spec's newer form)."""
    cat = new_rest_catalog(checking_s3, tmp_path / "rc", "restsc", vending="storage-credentials")
    try:
        with catalogs_in_process(cat):  # type: ignore[arg-type]
            for key in [k for k in os.environ if k.startswith("AWS_")]:
                monkeypatch.delenv(key)
            table = cat.catalog()
            table.create_namespace("ns")
            t = table.create_table("ns.t", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
            t.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
            t.delete("id = 2")
            t.append(pa.table({"id": [4], "v": ["d"]}))
            loaded = cat.load("ns.t")
            assert "s3.secret-access-key" not in loaded.config  # not in config: in storage-credentials
            assert loaded.io.properties["s3.access-key-id"] == checking_s3.vended[-1].access_key_id
            # the executors get the vended keys, not the catalog client's secret or its OAuth2 session
            shipped = dict(read_context(loaded, None, []).io_properties)
            assert shipped["s3.secret-access-key"] == checking_s3.vended[-1].secret_access_key
            assert "credential" not in shipped and "auth.manager" not in shipped
            assert cat.client_secret not in repr(sorted(shipped.items()))
            out = tmp_path / "changes.parquet"
            assert cli_main(["changes", "--catalog", "restsc", "--table", "ns.t", "--output", str(out)]) == 0
            _exact(pq.read_table(out), loaded)
    finally:
        cat.stop()


def test_serve_picks_up_credentials_rotated_between_cycles(
    rest_catalog: RestCatalogFixture, checking_s3: CheckingS3, tmp_path: Path
) -> None:
    """`serve` loads the table (and so new vended keys) every batch: a revocation between cycles
    does not stop it. Everything vended before the rotation is refused by S3 afterwards."""
    catalog = rest_catalog.catalog()
    catalog.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    table = catalog.create_table("ns.rot", schema=schema)
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    sink = tmp_path / "sink"
    port = free_port()
    serve = Serve(
        ["--catalog", "restcat", "--table", "ns.rot", "--consumer", "rot",
         "--state", f"sqlite:///{tmp_path / 'state.db'}", "--sink", f"parquet://{sink}",
         "--interval", "1s", "--metrics-host", "127.0.0.1", "--metrics-port", str(port)],
        env={**_rest_env(rest_catalog, tmp_path / "spark"), "PYTHONUNBUFFERED": "1"},
        cwd=tmp_path, name="serve", port=port,
    )  # fmt: skip
    try:

        def delivered(n: int) -> int | None:
            rows = read_parquet_sink(sink)
            return rows.num_rows if rows is not None and rows.num_rows >= n else None

        wait_until(lambda: delivered(3), timeout=300, what="the first snapshot delivered", child=serve)
        before = list(checking_s3.vended)
        checking_s3.rotate()
        old = before[-1]
        with pytest.raises(OSError, match="ACCESS_DENIED"):
            checking_s3.fs(old).get_file_info(f"{rest_catalog.bucket}/warehouse/ns/rot/metadata/x")
        catalog.load_table("ns.rot").append(pa.table({"id": [4, 5], "v": ["d", "e"]}))
        wait_until(lambda: delivered(5), timeout=300, what="the second snapshot delivered", child=serve)
        rows = read_parquet_sink(sink)
        assert rows is not None and rows.num_rows == 5
        assert sorted(rows.column("id").to_pylist()) == [1, 2, 3, 4, 5]
        assert serve.alive(), serve.diagnostics()
    finally:
        serve.kill_group()
    stderr = serve.stderr()
    assert not [s for s in rest_catalog.secrets() if s in stderr], "a secret reached serve's log"
