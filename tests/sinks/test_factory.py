"""open_sink: URL forms, the path rule, and one-line errors for unusable URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.reader.sinks.factory import ACCEPTED_FORMS, open_sink
from icetail.reader.sinks.jsonl_sink import JsonlFileSink
from icetail.reader.sinks.parquet_sink import ParquetDirSink
from icetail.state.errors import ConfigError
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
