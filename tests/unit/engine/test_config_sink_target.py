"""PipelineConfig carries its sink URL parsed (sinks/urls.py SinkTarget): parsed once, where the
configuration is built, and read by whatever checks, records or opens the sink."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetail.kernel.errors import ConfigError
from icetail.monitor.engine.config import PipelineConfig
from icetail.sinks.files.parquet import ParquetDirSink
from icetail.sinks.registry import open_sink
from icetail.sinks.urls import parse_sink_url


def test_a_consumers_sink_url_is_parsed_once_into_the_target_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PipelineConfig carries the parsed target; what opens and records the sink reads that target,
    so a URL that parsed when the configuration was built opens the same sink whatever comes later."""
    monkeypatch.chdir(tmp_path)
    config = PipelineConfig(catalog="c", table="ns.t", state_url="sqlite:///s.db", sink_url="PARQUET://out/")
    assert config.sink_target == parse_sink_url("parquet://out/")
    assert config.sink_target.normalized() == f"parquet://{tmp_path}/out"
    sink = open_sink(config.sink_target, consumer="c1")
    assert isinstance(sink, ParquetDirSink) and sink.directory == tmp_path / "out"


def test_a_config_with_an_unusable_sink_url_is_built_and_refused_when_its_sink_is_needed() -> None:
    """A Pipeline given its own sink needs no URL, so the configuration is built; asking for the target
    raises the URL's one-line ConfigError."""
    config = PipelineConfig(catalog="c", table="ns.t", state_url="sqlite:///s.db", sink_url="callback")
    for _ in range(2):  # the same refusal each time it is asked for
        with pytest.raises(ConfigError, match="sink URL 'callback' is not usable: it has no scheme"):
            _ = config.sink_target


def test_a_postgresql_target_carries_its_connection_without_showing_its_password() -> None:
    pytest.importorskip("psycopg")
    url = "postgresql://icetail:s3cret@db:5432/app?table=public.orders"
    config = PipelineConfig(catalog="c", table="ns.t", state_url="sqlite:///s.db", sink_url=url)
    target = config.sink_target
    assert target.postgres is not None and (target.postgres.schema, target.postgres.table) == ("public", "orders")
    assert "s3cret" in target.postgres.conninfo and target.normalized() == target.postgres.identity
    assert "s3cret" not in repr(target) and "s3cret" not in target.normalized()


def test_a_configs_repr_shows_no_password() -> None:
    """A configuration reaches logs and tracebacks through its repr: the passwords of its store and
    sink URLs are masked there, the rest stays readable."""
    from icetail.monitor.service.config import ServiceConfig

    config = PipelineConfig(
        catalog="c",
        table="ns.t",
        state_url="postgresql://icetail:s3cret-store@db:5432/state",
        sink_url="postgresql://writer:s3cret-sink@db:5432/dw?table=public.orders",
    )
    shown = repr(ServiceConfig(pipelines=(config,)))
    assert "s3cret" not in shown and "s3cret" not in repr(config)
    assert "postgresql://writer:***@db:5432/dw?table=public.orders" in shown
    assert "table='ns.t'" in repr(config) and repr(config).startswith("PipelineConfig(catalog='c'")
