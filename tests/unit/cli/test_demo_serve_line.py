"""The `serve` line `icetail demo` prints for pasting listens on this machine only (issue 48): a demo run on
a laptop or a shared host should not open its metrics port to the network. `serve` itself keeps every
interface by default (the image's Kubernetes probes reach the pod IP); the README says how to open the
pasted one up (`--metrics-host 0.0.0.0`, in a container).

In-process: the printed line is parsed by icetail's own parser into serve's configuration; nothing runs.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from icetail.monitor.cli.demo_pipeline import follow_hint
from icetail.monitor.cli.main import build_parser
from icetail.monitor.service.config import build_service_config


def _serve_host(line: str, environ: dict[str, str]) -> str:
    words = shlex.split(line)
    args = build_parser().parse_args(words[words.index("serve") :])
    return build_service_config(args, environ=environ).metrics_host


def test_the_pasted_serve_line_binds_loopback(tmp_path: Path) -> None:
    catalog_env = {"PYICEBERG_CATALOG__DEMO__URI": f"sqlite:///{tmp_path}/catalog.db"}
    state, sink = f"sqlite:///{tmp_path}/state.db", f"parquet://{tmp_path}/sink"
    line = follow_hint(catalog_env, "shop.orders", state, sink, ("order_id",))[-1]
    assert _serve_host(line, {}) == "127.0.0.1", line
    assert _serve_host(line, {"ICETAIL_METRICS_HOST": "0.0.0.0"}) == "127.0.0.1"  # the pasted flag wins
    assert line.endswith("--identifier-columns order_id"), line  # the demo's columns, as before

    unpinned = line.replace(" --metrics-host 127.0.0.1", "")
    assert _serve_host(unpinned, {}) == "0.0.0.0"  # serve's own default (the image's) is unchanged
