"""`--verify` through the one loader of `run` and `serve`: config file < ICETAIL_VERIFY < flag, checked where given."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icetail.kernel.errors import ConfigError
from icetail.monitor.cli.main import build_parser
from icetail.monitor.engine.config import PipelineConfig
from icetail.monitor.service.config import build_service_config

BASE = {"catalog": "prod", "table": "db.events", "state": "sqlite:////tmp/s.db", "sink": "parquet:///tmp/c"}


def _verify(tmp_path: Path, file_value: str | None, *flags: str, command: str = "serve", **env: str) -> str:
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump({**BASE, **({"verify": file_value} if file_value else {})}))
    args = build_parser().parse_args([command, "--config", str(path), *flags])
    (pipeline,) = build_service_config(args, environ=env).pipelines
    return pipeline.verify


@pytest.mark.parametrize("command", ["run", "serve"])
def test_default_is_warn_and_layers_override(tmp_path: Path, command: str) -> None:
    assert _verify(tmp_path, None, command=command) == "warn"
    assert _verify(tmp_path, "strict", command=command) == "strict"
    assert _verify(tmp_path, "strict", command=command, ICETAIL_VERIFY="off") == "off"
    assert _verify(tmp_path, "strict", "--verify", "warn", command=command, ICETAIL_VERIFY="off") == "warn"


@pytest.mark.parametrize(
    ("file_value", "flags", "env", "source"),
    [
        ("loud", (), {}, "icetail.yaml: verify must be one of off, warn, strict, got 'loud'"),
        (None, (), {"ICETAIL_VERIFY": "strcit"}, "ICETAIL_VERIFY: verify must be one of off, warn, strict"),
        (None, ("--verify", "on"), {}, "--verify 'on' is not one of off, warn, strict"),
    ],
    ids=["file", "environment", "flag"],
)
def test_a_bad_value_is_refused_naming_its_source(
    tmp_path: Path, file_value: str | None, flags: tuple[str, ...], env: dict[str, str], source: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _verify(tmp_path, file_value, *flags, **env)
    assert source in str(refused.value) and "\n" not in str(refused.value)


def test_pipeline_config_checks_verify() -> None:
    with pytest.raises(ConfigError, match="--verify 'maybe' is not one of off, warn, strict"):
        PipelineConfig("c", "ns.t", "sqlite:///s.db", "-", verify="maybe")
