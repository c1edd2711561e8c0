"""open_sink: URL forms, the path rule, and one-line errors for unusable URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.kernel.errors import ConfigError
from icetail.sinks.files.jsonl import JsonlFileSink
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.registry import open_sink
from icetail.sinks.urls import ACCEPTED_FORMS, normalize_sink_url
from tests.sinks import CONSUMER


def test_three_slashes_is_absolute_two_is_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = open_sink(f"parquet://{tmp_path}/abs", consumer=CONSUMER)
    relative = open_sink("parquet://rel/dir", consumer=CONSUMER)
    lines = open_sink("jsonl://logs/changes.jsonl", consumer=CONSUMER)
    assert isinstance(absolute, ParquetDirSink) and absolute.directory == tmp_path / "abs"
    assert isinstance(relative, ParquetDirSink) and relative.directory == tmp_path / "rel" / "dir"
    assert isinstance(lines, JsonlFileSink) and lines.path == tmp_path / "logs" / "changes.jsonl"
    lines.close()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "no scheme"),
        ("/tmp/out", "no scheme"),
        ("parquet:/tmp/out", "no scheme"),
        ("kafka://broker/topic", "unknown scheme 'kafka'"),
        ("stdout://", "unknown scheme 'stdout'"),
        ("parquet://", "no path"),
        ("jsonl:///tmp/x.jsonl?mode=w", "no query"),
        ("iceberg://", "no catalog"),
        ("iceberg://cat", "no catalog"),
        ("iceberg:///ns.t", "no catalog"),
        ("iceberg://cat/table", "NAMESPACE.TABLE"),
        ("iceberg://cat/ns.", "NAMESPACE.TABLE"),
        ("iceberg://cat/ns/t", "NAMESPACE.TABLE"),
    ],
)
def test_bad_urls_name_the_url_and_the_accepted_forms(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_sink(url, consumer=CONSUMER)
    message = str(info.value)
    assert "\n" not in message
    assert repr(url) in message and reason in message
    assert all(form in message for form in ACCEPTED_FORMS)


def test_consumer_is_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="consumer"):
        open_sink(f"parquet://{tmp_path}", consumer="")


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("parquet://s3://bucket/changes", "s3"),
        ("parquet:///s3://bucket/changes", "s3"),
        ("jsonl://gs://bucket/c.jsonl", "gs"),
        ("parquet://file:///tmp/x", "file"),
        ("iceberg://s3://bucket/t", "s3"),
    ],
)
def test_a_remote_url_inside_a_sink_url_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, scheme: str
) -> None:
    """Never a local folder named `s3:` in the working directory."""
    monkeypatch.chdir(tmp_path)
    for attempt in (lambda: open_sink(url, consumer=CONSUMER), lambda: normalize_sink_url(url)):
        with pytest.raises(ConfigError) as caught:
            attempt()
        assert f"{scheme}://" in str(caught.value) and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_normalized_sink_urls_name_one_sink_one_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    same = {normalize_sink_url(u) for u in ("parquet://out", f"parquet://{tmp_path}/out/", f"PARQUET://{tmp_path}/x/../out")}
    assert same == {f"parquet://{tmp_path}/out"}
    assert normalize_sink_url("-") == normalize_sink_url(" stdout: ") == "stdout:"
    assert normalize_sink_url("Iceberg://prod/db.t") == "iceberg://prod/db.t"
    assert normalize_sink_url("jsonl://c.jsonl") == f"jsonl://{tmp_path}/c.jsonl"
    with pytest.raises(ConfigError, match="~ is not expanded"):
        normalize_sink_url("parquet://~/out")


def test_every_kind_of_sink_is_named_by_a_url() -> None:
    """SINK_KINDS is the one table of sinks: each entry is the kind of some accepted URL, and no URL
    form names a kind that is not in it."""
    from icetail.sinks.registry import SINK_KINDS, kind_of
    from icetail.sinks.urls import parse_sink_url

    urls = [
        "parquet:///tmp/x",
        "parquet+s3://bucket/prefix",
        "jsonl:///tmp/x.jsonl",
        "-",
        "iceberg://cat/ns.t",
        "iceberg://cat/ns.t?mode=mirror",
        "iceberg://cat/ns.t?mode=history",
        "postgresql://u@localhost:5432/db?table=public.t",
        "nats://localhost:4222/cdc?stream=CDC",
        "redis-stream://localhost:6379/cdc",
        "rabbitmq-stream://localhost:5552/cdc",
    ]
    kinds = [kind_of(parse_sink_url(url)) for url in urls]
    assert sorted(kind.name for kind in kinds) == sorted(kind.name for kind in SINK_KINDS.values())
    tls = ["tls://localhost:4222/cdc?stream=CDC", "rediss-stream://localhost:6379/cdc", "rabbitmq-stream+tls://h/cdc"]
    assert [kind_of(parse_sink_url(url)) for url in tls] == kinds[-3:]  # the bus sinks over TLS: the same kinds
    urls += tls
    assert {url.split(":")[0] for url in ACCEPTED_FORMS} <= {url.split(":")[0] for url in urls} | {"stdout", "-"}


def test_the_debezium_envelope_is_put_around_any_sink_once(tmp_path: Path) -> None:
    from icetail.sinks.debezium import EnvelopeSink
    from icetail.sinks.registry import formatted

    plain = open_sink(f"parquet://{tmp_path}/plain", consumer=CONSUMER)
    enveloped = open_sink(f"parquet://{tmp_path}/env", consumer=CONSUMER, output_format="debezium", table="ns.t")
    assert isinstance(plain, ParquetDirSink)
    assert isinstance(enveloped, EnvelopeSink)
    assert formatted(enveloped, "debezium", "ns.t") is enveloped  # never twice
    assert formatted(plain, "changelog", "ns.t") is plain

