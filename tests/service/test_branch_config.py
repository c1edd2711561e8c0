"""`branch` through the one loader of `run` and `serve`: config file < ICETAIL_BRANCH < --branch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icetail.kernel.errors import ConfigError
from icetail.monitor.cli.main import build_parser
from icetail.monitor.service.config import build_service_config, run_config

BASE = {"catalog": "prod", "table": "db.events", "state": "sqlite:////s.db", "sink": "parquet:///out"}


def write(tmp_path: Path, content: dict[str, object]) -> str:
    path = tmp_path / "icetail.yaml"
    path.write_text(yaml.safe_dump(content))
    return str(path)


def test_branch_layers(tmp_path: Path) -> None:
    parser = build_parser()
    path = write(tmp_path, {**BASE, "branch": "from-file"})
    assert run_config(parser.parse_args(["run", "--config", path]), environ={}).branch == "from-file"
    env = {"ICETAIL_BRANCH": "from-env"}
    assert run_config(parser.parse_args(["run", "--config", path]), environ=env).branch == "from-env"
    flags = ["run", "--config", path, "--branch", "from-flag"]
    assert run_config(parser.parse_args(flags), environ=env).branch == "from-flag"
    assert run_config(parser.parse_args(["run", "--config", write(tmp_path, BASE)]), environ={}).branch == "main"


def test_branch_per_table_in_serve(tmp_path: Path) -> None:
    content = {**BASE, "tables": [{"consumer": "audit", "branch": "audit"}, {"consumer": "published"}]}
    args = build_parser().parse_args(["serve", "--config", write(tmp_path, content)])
    config = build_service_config(args, environ={})
    assert [(p.consumer, p.branch) for p in config.pipelines] == [("audit", "audit"), ("published", "main")]


@pytest.mark.parametrize("value", ["", " audit", 7])
def test_a_bad_branch_is_refused_in_one_line(tmp_path: Path, value: object) -> None:
    path = write(tmp_path, {**BASE, "branch": value})
    with pytest.raises(ConfigError) as caught:
        run_config(build_parser().parse_args(["run", "--config", path]), environ={})
    assert "\n" not in str(caught.value) and "branch" in str(caught.value)
