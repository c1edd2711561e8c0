"""A PostgreSQL password, in every form libpq accepts, never appears in anything icetail prints or writes.

The forms: `user:password@` in a URL, a `password=` query parameter (valid libpq URL syntax), a
`password=` keyword of a DSN string, and the value of `PGPASSWORD` echoed anywhere. Real `icetail`
processes run against the real PostgreSQL (trust auth accepts any password, so the runs succeed
with one in the URL) and against a port nothing listens on (the error path); a spark-submit run
records Spark's event log, where the command line lands in `sun.java.command`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from icetail.kernel.errors import SinkError, StateUnavailableError
from icetail.kernel.secrets import REDACTED, redact_text
from icetail.monitor.service.logs import JsonFormatter, LineFormatter
from icetail.state.urls import parse_store_url
from tests.support.catalogs import new_catalog
from tests.support.processes import child_env, icetail_lines, run_icetail
from tests.support.stores import drop_state, pg_unavailable

PG = "127.0.0.1:5432/test"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("postgresql://u:S3cretA@h:5432/db", "S3cretA"),
        ("postgresql://u@h/db?password=S3cretB", "S3cretB"),
        ("postgresql://u@h/db?sslmode=disable&password=S3cretC&schema=x", "S3cretC"),
        ("postgresql://u@h/db?sslpassword=S3cretD", "S3cretD"),
        ("host=h user=u password=S3cretE dbname=db", "S3cretE"),
        ("host=h password = 'S3cret F' dbname=db", "S3cret F"),
        ('failed: {"url": "postgresql://u@h/db?password=S3cretG"}', "S3cretG"),
    ],
)
def test_every_libpq_password_form_is_redacted(text: str, secret: str) -> None:
    shown = redact_text(text, environ={})
    assert secret not in shown
    assert REDACTED in shown


def test_what_is_not_a_secret_stays_readable() -> None:
    text = "postgresql://u@h:5432/db?schema=icetail&sslmode=require passfile=/home/u/.pgpass table=s.t"
    assert redact_text(text, environ={}) == text


@pytest.mark.parametrize(
    "template",
    [
        "postgresql://USER[:PASSWORD]@HOST:PORT/DB?table=SCHEMA.TABLE",
        "postgresql://user:PASSWORD@host/db",
        "postgresql://u:<password>@h/db",
        "postgresql://u:${PGPASSWORD}@h/db",
        "host=h password=<password> dbname=db",
        "postgresql://u@h/db?password=PASSWORD&sslpassword=...",
    ],
)
def test_templates_and_placeholders_survive_redaction(template: str) -> None:
    assert redact_text(template, environ={}) == template


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("postgresql://u:HUNTER2@h/db", "HUNTER2"),  # capitals, but not a placeholder word
        ("postgresql://u:password@h/db", "u:password@"),  # the word in lower case is a real password
        ("postgresql://u:PASSWORDX@h/db", "PASSWORDX"),
        ("postgresql://u@h/db?password=PASSWORD1", "PASSWORD1"),
    ],
)
def test_real_passwords_that_look_like_placeholders_are_still_redacted(text: str, secret: str) -> None:
    assert secret not in redact_text(text, environ={})


def test_the_form_a_refused_mirror_url_prints_is_intact() -> None:
    from icetail.kernel.errors import ConfigError
    from icetail.sinks.postgres.url import FORM, parse_mirror_url

    with pytest.raises(ConfigError) as refused:
        parse_mirror_url("postgresql://u:S3cretQ@h:5432/db")  # no ?table=
    assert FORM in str(refused.value) and "S3cretQ" not in str(refused.value)


def test_pgpassword_value_is_redacted_wherever_it_is_echoed() -> None:
    shown = redact_text("authentication failed (tried Hunter2x)", environ={"PGPASSWORD": "Hunter2x"})
    assert shown == f"authentication failed (tried {REDACTED})"


def test_errors_and_log_records_carry_no_password() -> None:
    error = StateUnavailableError("cannot reach checkpoint store postgresql://u@h/db?password=S3cretH")
    assert "S3cretH" not in str(error) and "S3cretH" not in repr(error.args)
    # an error made from a driver's text, as the sinks and stores do
    assert "S3cretI" not in str(SinkError("copy failed: host=h password=S3cretI"))
    args = ("postgresql://u:S3cretJ@h/db",)
    record = logging.LogRecord("icetail", logging.ERROR, __file__, 1, "store %s", args, None)
    record.url = "postgresql://u@h/db?password=S3cretK"
    for formatter in (JsonFormatter(), LineFormatter()):
        line = formatter.format(record)
        assert "S3cretJ" not in line and "S3cretK" not in line, line


def test_store_display_hides_the_query_password() -> None:
    location = parse_store_url("postgresql://u@h/db?schema=s&password=S3cretL")
    assert "S3cretL" not in location.display
    assert "S3cretL" in location.conninfo  # the connection still gets it


def test_unreachable_store_error_names_it_without_the_password(tmp_path: Path) -> None:
    env = child_env(spark_dir=tmp_path / "spark", extra={"PGPASSWORD": "EnvS3cretM"})
    state = "postgresql://u@127.0.0.1:1/test?password=S3cretN&connect_timeout=2"
    result = run_icetail(["status", "--state", state], env, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = icetail_lines(result.stderr)
    assert len(lines) == 1 and "cannot reach checkpoint store postgresql://u@127.0.0.1:1/test" in lines[0], lines
    assert "S3cretN" not in result.stderr and "EnvS3cretM" not in result.stderr


@pytest.mark.skipif(pg_unavailable() is not None, reason=str(pg_unavailable()))
def test_run_status_and_spark_event_log_never_show_the_password(tmp_path: Path) -> None:
    cat = new_catalog(tmp_path / "cat", "pwcat")
    table = cat.catalog()
    table.create_namespace("ns")
    t = table.create_table("ns.t", schema=pa.schema([("id", pa.int64()), ("v", pa.string())]))
    t.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    schema = f"icetail_pw_{uuid.uuid4().hex[:10]}"
    # trust auth: PostgreSQL accepts whatever password is sent, so every form below connects
    url_secret, query_secret, env_secret = "UrlS3cretP", "QueryS3cretQ", "EnvS3cretR"
    state = f"postgresql://postgres:{url_secret}@{PG}?schema={schema}&password={query_secret}"
    # no `password` word in it: Spark's default redaction would not hide this one
    submitted_state = f"postgresql://postgres:{url_secret}@{PG}?schema={schema}"
    events, conf_dir = tmp_path / "spark-events", tmp_path / "spark-conf"
    events.mkdir()
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\nspark.eventLog.compress false\n"
    )
    env = child_env([cat], tmp_path / "spark", extra={"PGPASSWORD": env_secret, "SPARK_CONF_DIR": str(conf_dir)})
    sink = tmp_path / "sink"
    try:
        source = ["--catalog", "pwcat", "--table", "ns.t", "--sink", f"parquet://{sink}"]
        common = [*source, "--state", state]
        # spark-submit puts the job's arguments into sun.java.command, which Spark records in its event log
        submitted = subprocess.run(
            ["bash", str(DEPLOY / "spark-submit.sh"), *source, "--state", submitted_state, "--consumer", "c"],
            env={**env, "PYTHON": sys.executable, "SPARK_HOME": _spark_home()},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        runs = {
            "spark-submit": submitted,
            "run": run_icetail(["run", *common, "--consumer", "c2", "--once"], env),
            "status": run_icetail(["status", "--state", state], env),
            "status-json": run_icetail(["status", "--state", state, "--json"], env),
            "refused": run_icetail(["run", *common, "--consumer", "c", "--sink", f"parquet://{sink}2"], env),
        }
        assert runs["refused"].returncode == 2
        for name in ("run", "status", "status-json"):
            assert runs[name].returncode == 0, f"{name}: {runs[name].stderr}"
        assert '"consumer": "c2"' in runs["status-json"].stdout  # status really read the store
        logs = [p for p in events.rglob("*") if p.is_file()]
        assert logs, "Spark wrote no event log"
        captured = {f"{n} {s}": getattr(r, s) for n, r in runs.items() for s in ("stdout", "stderr")}
        captured.update({str(p): p.read_text(errors="replace") for p in logs})
        assert any("sun.java.command" in captured[str(p)] for p in logs)  # the command line is recorded
        secrets = (url_secret, query_secret, env_secret)
        leaks = [(where, s) for where, text in captured.items() for s in secrets if s in text]
        assert leaks == []
    finally:
        drop_state(f"postgresql://postgres@{PG}?schema={schema}")


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))

